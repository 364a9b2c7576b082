"""Builders on the real files in ../shared/data (skipped when that folder is absent)."""

import functools
import json
from collections import Counter
from pathlib import Path

import pytest
from halubench_data import (
    build_claims,
    build_faithbench,
    build_ragtruth,
    link_groups,
    read_jsonl,
    write_jsonl,
)

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
pytestmark = pytest.mark.skipif(not (DATA / "ragtruth").is_dir(), reason=f"shared data not found at {DATA}")


@pytest.fixture(scope="module")
def ragtruth():
    return _built("ragtruth")


def test_ragtruth_counts_per_task_and_label_match_provenance(ragtruth):
    # PROVENANCE.md: responses / hallucinated per task
    expected = {"ragtruth_qa": (817, 259), "ragtruth_summary": (900, 241), "ragtruth_data2txt": (900, 579)}
    for source, (n, n_hal) in expected.items():
        part = ragtruth.filter(lambda e, s=source: e.source == s)
        assert (len(part), int(part.labels.sum())) == (n, n_hal)
    assert sum(len(e.spans) for e in ragtruth if e.source == "ragtruth_qa") == 387
    assert sum(len(e.spans) for e in ragtruth if e.source == "ragtruth_data2txt") == 1054
    assert ragtruth.report.n_dropped == 0 and ragtruth.report.n_read == 2617


def test_ragtruth_llama_qa_subset(ragtruth):
    sub = build_ragtruth(DATA / "ragtruth", tasks=["QA"], models=["llama-2-70b-chat"])
    assert (len(sub), int(sub.labels.sum())) == (137, 51)
    assert sub.report.filtered == {"task not in ['QA']": 1800, "model not in ['llama-2-70b-chat']": 680}
    sub.check_groups()


def test_ragtruth_spans_round_trip(ragtruth, tmp_path):
    original = {}
    with (DATA / "ragtruth" / "ragtruth_qa.jsonl").open() as f:
        for line in f:
            row = json.loads(line)
            for k, resp in enumerate(row["responses"]):
                original[f"ragtruth-{row['source_id']}-{k}"] = [lab["text"] for lab in resp["labels"]]
    back = read_jsonl(write_jsonl(ragtruth, tmp_path / "rt.jsonl"))
    assert back.examples == ragtruth.examples
    qa = [e for e in back if e.source == "ragtruth_qa"]
    assert len(qa) == len(original)
    for e in qa:
        assert [e.answer[s.start : s.end] for s in e.spans] == original[e.id]
        assert e.label == int(bool(original[e.id]))


def test_ragtruth_groups_never_cross_splits_and_split_near_70_15_15(ragtruth):
    ragtruth.check_groups()
    assert len({e.group for e in ragtruth}) == 139 + 150 + 150
    n = Counter(e.split for e in ragtruth)
    assert abs(n["train"] / len(ragtruth) - 0.70) < 0.03
    assert abs(n["test"] / len(ragtruth) - 0.15) < 0.03


@pytest.mark.parametrize(
    ("name", "folder", "n", "n_supported"),
    [
        # wice's long claims: the slowest build and near-duplicate scan (the other sources run by default)
        pytest.param("wice", "llm-aggrefact", 358 + 349, 111 + 115, marks=pytest.mark.slow),
        ("lfqa", "llm-aggrefact", 3968, 2285),
        ("claimverify", "llm-aggrefact", 730, 365),
        ("expertqa", "expertqa", 660, 330),
    ],
)
def test_claim_sets_convert_support_labels(name, folder, n, n_supported):
    ds = _built(name)
    assert len(ds) == n and ds.report.n_dropped == 0
    assert int((ds.labels == 0).sum()) == n_supported  # their label 1 (supported) is our label 0
    ds.check_groups()
    if name == "lfqa":
        assert len({e.group for e in ds}) == 99  # 100 question_ids; two share near-duplicate documents


def test_faithbench_counts():
    ds = _built("faithbench")
    assert len(ds) == 720 and int(ds.labels.sum()) == 407  # PROVENANCE: any Unwanted span
    assert len({e.group for e in ds}) == 63  # 72 source articles; 9 near-duplicate pairs merged
    assert all(e.spans for e in ds if e.label == 1 and e.meta["majority"] == "Unwanted")
    ds.check_groups()


def _near_duplicate_components_crossing_splits(ds) -> list[set[str]]:
    """Components of the 5-gram rule (per source) whose examples lie in more than one split."""
    comp = link_groups([e.context for e in ds], [e.source for e in ds])
    splits: dict[str, set[str]] = {}
    for e, c in zip(ds, comp, strict=True):
        splits.setdefault(c, set()).add(str(e.split))
    return [v for v in splits.values() if len(v) > 1]


@functools.cache
def _built(name: str):
    """Each real builder's dataset, built once for the module."""
    if name == "ragtruth":
        return build_ragtruth(DATA / "ragtruth")
    if name == "faithbench":
        return build_faithbench(DATA / "faithbench")
    return build_claims(name, DATA / ("expertqa" if name == "expertqa" else "llm-aggrefact"))


@pytest.mark.parametrize(
    "name",
    [
        "ragtruth",
        "faithbench",
        pytest.param("wice", marks=pytest.mark.slow),
        "lfqa",
        "claimverify",
        "expertqa",
    ],
)
def test_no_near_duplicate_component_spans_splits(name):
    ds = _built(name)
    assert _near_duplicate_components_crossing_splits(ds) == []
