import re
from collections import Counter

import pytest
from halubench_data import build_default, length_baseline, read_jsonl, tfidf_baseline, write_jsonl

HALLUCINATED_KINDS = {
    "changed_number",
    "swapped_entity",
    "reversed_finding",
    "unsupported_detail",
    "wrong_arithmetic",
    "false_refusal",
}
FAITHFUL_KINDS = {"paraphrase", "partial", "refusal"}


@pytest.fixture(scope="module")
def ds():
    return build_default()


def test_default_size_labels_and_splits(ds):
    assert len(ds) == 600
    assert ds.labels.sum() == 300
    ds.check_groups()
    n = Counter(e.split for e in ds)
    assert abs(n["train"] / 600 - 0.70) < 0.05
    assert abs(n["validation"] / 600 - 0.15) < 0.05 and abs(n["test"] / 600 - 0.15) < 0.05
    for part in (ds.train, ds.validation, ds.test):
        assert 0.4 < part.labels.mean() < 0.6


def test_default_is_deterministic_and_seed_dependent(ds):
    assert build_default().examples == ds.examples
    assert build_default(seed=7).examples != ds.examples


def test_default_kinds_and_contexts(ds):
    kinds = Counter((e.label, e.meta["kind"]) for e in ds)
    assert {k for (label, k) in kinds if label == 1} == HALLUCINATED_KINDS
    assert {k for (label, k) in kinds if label == 0} == FAITHFUL_KINDS
    words = [len(e.context.split()) for e in ds]
    assert 60 <= min(words) and max(words) <= 120
    for e in ds:
        if e.label == 1:
            (span,) = e.spans
            assert e.answer[span.start : span.end].strip()


def test_every_answer_string_is_faithful_once_and_hallucinated_once_per_group(ds):
    per_group = Counter((e.group, e.answer, e.label) for e in ds)
    for (group, answer, label), n in per_group.items():
        assert per_group[(group, answer, 1 - label)] == n


def test_hallucinated_answer_is_not_supported_by_its_context(ds):
    # a changed number or swapped entity appears in the sibling's context, not in its own
    by_id = {e.id: e for e in ds}
    for e in ds:
        if e.meta["kind"] in ("changed_number", "swapped_entity") and e.label == 1:
            span = e.answer[e.spans[0].start : e.spans[0].end].strip(".")
            own = re.search(rf"\b{re.escape(span)}\b", e.context)
            assert own is None, (e.id, span)
            sibling = by_id[e.id.replace("-a-", "-x-").replace("-b-", "-a-").replace("-x-", "-b-")]
            assert re.search(rf"\b{re.escape(span)}\b", sibling.context), (e.id, span)


def test_answer_only_baselines_are_at_chance(ds):
    assert length_baseline(ds, n_bootstrap=200).auroc <= 0.60
    assert tfidf_baseline(ds, n_bootstrap=200).auroc <= 0.60


def test_default_round_trips_through_jsonl(ds, tmp_path):
    assert read_jsonl(write_jsonl(ds, tmp_path / "d.jsonl")).examples == ds.examples


def test_default_rejects_bad_sizes():
    with pytest.raises(ValueError, match="even"):
        build_default(n_contexts=7)
    assert len(build_default(n_contexts=20, questions_per_context=1)) == 40
