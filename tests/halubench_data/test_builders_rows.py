"""Builders on small rows written here in each public format."""

import csv
import json

import numpy as np
import pytest
from halubench_data import (
    FieldMap,
    auroc,
    build_claims,
    build_halubench,
    build_phantom,
    build_ragtruth,
    build_ragtruth_original,
    build_trivia_plus,
    halubench_from_hub_rows,
    supported_to_label,
)
from halubench_data.builders import PHANTOM_10K_2000, phantom_file


def _jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _words(k, n=40):
    return " ".join(f"t{k}w{i}" for i in range(n))


def test_ragtruth_original_release(tmp_path):
    _jsonl(
        tmp_path / "source_info.jsonl",
        [
            {
                "source_id": "1",
                "task_type": "QA",
                "source_info": {"question": "Who?", "passages": "passage 1: Ann did."},
            },
            {"source_id": "2", "task_type": "Summary", "source_info": "A long article."},
            {"source_id": "3", "task_type": "Data2txt", "source_info": {"name": "Cafe", "city": "Rome"}},
        ],
    )
    resp = "Bob did it in Paris."
    _jsonl(
        tmp_path / "response.jsonl",
        [
            {
                "id": "10",
                "source_id": "1",
                "model": "llama-2-70b-chat",
                "response": resp,
                "split": "train",
                "labels": [{"start": 0, "end": 3, "text": "Bob", "label_type": "Evident Conflict"}],
            },
            {
                "id": "11",
                "source_id": "1",
                "model": "gpt-4-0613",
                "response": "Ann did.",
                "split": "test",
                "labels": [],
            },
            {"id": "12", "source_id": "2", "model": "llama-2-70b-chat", "response": "Summary.", "labels": []},
            {"id": "13", "source_id": "3", "model": "llama-2-70b-chat", "response": "A cafe.", "labels": []},
            {"id": "14", "source_id": "9", "model": "llama-2-70b-chat", "response": "x", "labels": []},
            {"id": "15", "source_id": "1", "model": "llama-2-70b-chat", "response": "   ", "labels": []},
            {
                "id": "16",
                "source_id": "1",
                "model": "llama-2-70b-chat",
                "response": "abc",
                "labels": [{"start": 1, "end": 9}],
            },
            "{broken",
        ],
    )
    ds = build_ragtruth_original(tmp_path, tasks=["QA", "Data2txt"])
    assert sorted(e.meta["response_id"] for e in ds) == ["10", "11", "13"]
    bob = next(e for e in ds if e.meta["response_id"] == "10")
    assert (bob.label, bob.answer[bob.spans[0].start : bob.spans[0].end], bob.spans[0].label) == (
        1,
        "Bob",
        "Evident Conflict",
    )
    assert (bob.question, bob.context, bob.group, bob.meta["original_split"]) == (
        "Who?",
        "passage 1: Ann did.",
        "ragtruth:1",
        "train",
    )
    assert json.loads(next(e for e in ds if e.meta["response_id"] == "13").context) == {
        "name": "Cafe",
        "city": "Rome",
    }
    report = ds.report
    assert report.n_read == 8 and report.filtered == {"task not in ['QA', 'Data2txt']": 1}
    assert sorted((d.line, d.field) for d in report.drops) == [
        (5, "source_id"),
        (6, "response"),
        (7, "labels"),
        (8, "<json>"),
    ]
    only_llama = build_ragtruth_original(tmp_path, models=["llama-2-70b-chat"])
    assert "11" not in {e.meta["response_id"] for e in only_llama}


def test_ragtruth_faithjudge_rows_and_bad_task(tmp_path):
    path = _jsonl(
        tmp_path / "ragtruth_qa.jsonl",
        [
            {
                "source_id": 5,
                "source": {"question": "Q?", "passages": "P."},
                "responses": [
                    {"response": "Yes.", "model": "m", "labels": []},
                    {
                        "response": "No way.",
                        "model": "m",
                        "labels": [{"start": 0, "end": 2, "text": "No", "label_type": "x"}],
                    },
                    {"response": "Odd.", "model": "m", "labels": [{"start": 0, "end": 2, "text": "zz"}]},
                ],
            },
        ],
    )
    ds = build_ragtruth(path)
    assert [e.label for e in ds] == [0, 1] and ds.report.drops[0].field == "labels"
    with pytest.raises(ValueError, match="unknown RAGTruth tasks"):
        build_ragtruth(path, tasks=["Chat"])


def _halubench_rows():
    rows = []
    rng = np.random.default_rng(0)
    for i in range(200):  # HaluEval: short faithful answers, long hallucinated ones
        label = i % 2
        n = int(rng.integers(1, 4) + 4 * label * rng.integers(0, 2))
        rows.append(
            {
                "id": f"he{i}",
                "passage": _words(i),
                "question": "q",
                "answer": " ".join(["a"] * n),
                "label": "FAIL" if label else "PASS",
                "source_ds": "halueval",
            }
        )
    base = _words(999, 80)
    for i in range(6):  # FinanceBench: near-duplicate filings share long numbers, not 5-grams
        nums = " ".join(str(10_000 + 7 * k) for k in range(8))
        rows.append(
            {
                "id": f"fb{i}",
                "passage": f"filing {i} {_words(500 + i)} {nums}",
                "question": "q",
                "answer": "x",
                "label": "PASS" if i % 2 else "FAIL",
                "source_ds": "FinanceBench",
            }
        )
    for i in range(4):  # DROP: contexts overlapping by most 5-grams
        rows.append(
            {
                "id": f"dr{i}",
                "passage": base + f" tail {i}",
                "question": "q",
                "answer": "y",
                "label": "FAIL" if i % 2 else "PASS",
                "source_ds": "DROP",
            }
        )
    rows.append(
        {"id": "bad", "passage": "p", "question": "q", "answer": "z", "label": "MAYBE", "source_ds": "DROP"}
    )
    return rows


def test_halubench_filters(tmp_path):
    path = _jsonl(tmp_path / "halubench.jsonl", _halubench_rows())
    ds = build_halubench(path)
    he = ds.filter(lambda e: e.source == "halubench_halueval")
    lengths = np.array([len(e.answer.split()) for e in he])
    assert auroc(lengths, he.labels) == 0.5
    assert ds.report.filtered["HaluEval length balancing"] == 200 - len(he)
    assert [(d.line, d.field) for d in ds.report.drops] == [(211, "label")]
    assert len({e.group for e in ds if e.source == "halubench_financebench"}) == 1
    assert len({e.group for e in ds if e.source == "halubench_drop"}) == 1
    ds.check_groups()
    raw = build_halubench(path, apply_filters=False)
    assert len(raw) == 210 and len({e.group for e in raw if e.source == "halubench_drop"}) == 4


def test_halubench_hub_rows_and_csv(tmp_path):
    rows = _halubench_rows()[:-1]
    from_hub = halubench_from_hub_rows(rows)
    path = tmp_path / "hb.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    from_csv = build_halubench(path)
    assert [(e.id, e.label, e.group, e.split) for e in from_hub] == [
        (e.id, e.label, e.group, e.split) for e in from_csv
    ]
    raw = halubench_from_hub_rows(rows, apply_filters=False)  # the flag reaches the filters
    assert len(raw) == 210 and len(raw) > len(from_hub)


def test_halubench_hub_rows_respect_apply_filters():
    # the builtin ``filter`` was passed for ``apply_filters``, so the unfiltered benchmark still filtered
    rows = _halubench_rows()[:-1]
    raw = halubench_from_hub_rows(rows, apply_filters=False)
    assert len(raw) == len(rows) == 210
    assert "HaluEval length balancing" not in raw.report.filtered
    assert len(halubench_from_hub_rows(rows)) < 210


def _trivia_row(i, article, answer, label, split, source="nq"):
    """One row in the TRIVIA+ release's schema (DATA_DETAILS.md), noisy label columns included."""
    return {
        "source": source, "split": split, "model": "claude", "article": article,
        "question": f"Question {i}?", "answer": answer, "workerId": ["w1", "w2"],
        "response-level-labels-bin": [str(label), str(label)],
        "answer_sentence_list": [answer], "sentence_level_majority_vote": ["supports"],
        "response_level_label_binary": label, "response_level_label": label,
        "response_level_label_binary_ws_llm_aaj": 1 - label,
        "response_level_label_binary_15pct_noise_random_flipping": 1 - label,
    }  # fmt: skip


def test_trivia_plus_release_schema_and_splits(tmp_path):
    rows = [
        _trivia_row(0, "Paris is in France.", "France", 0, "train"),
        _trivia_row(1, "Paris is in France.", "Spain", 1, "train", source="ms_marco"),
        _trivia_row(2, "Rome is in Italy.", "Italy", 0, "valid", source="msmarco"),
        _trivia_row(3, "Rome is in Italy.", "Greece", 1, "test"),
        _trivia_row(4, "Oslo is in Norway.", "", 1, "test"),
    ]
    path = _jsonl(tmp_path / "trivia.jsonl", rows)
    ds = build_trivia_plus(path)
    assert [(e.id, e.label, e.split, e.answer) for e in ds] == [
        ("trivia_plus-1", 0, "train", "France"),
        ("trivia_plus-2", 1, "train", "Spain"),
        ("trivia_plus-3", 0, "validation", "Italy"),
        ("trivia_plus-4", 1, "test", "Greece"),
    ]  # the gold label, never the noisy columns; the release's splits
    assert [e.source for e in ds] == ["trivia_plus_nq", "trivia_plus_msmarco", "trivia_plus_msmarco",
                                      "trivia_plus_nq"]  # fmt: skip
    assert ds[0].context == "Paris is in France." and ds[0].question == "Question 0?"
    ds.check_groups()
    assert ds.report.drops[0].field == "answer" and ds.report.drops[0].line == 5
    assert ds.report.filtered == {}
    reassigned = build_trivia_plus(path, release_splits=False)
    reassigned.check_groups()
    bad = _jsonl(tmp_path / "bad.jsonl", [_trivia_row(0, "A b c.", "x", 0, "holdout")])
    assert build_trivia_plus(bad).report.drops[0].field == "split"


def test_trivia_plus_counts_contexts_the_release_shares_across_splits(tmp_path):
    rows = [_trivia_row(0, "Same article.", "a", 0, "train"), _trivia_row(1, "Same article.", "b", 1, "test"),
            _trivia_row(2, "Other article.", "c", 0, "valid")]  # fmt: skip
    ds = build_trivia_plus(_jsonl(tmp_path / "t.jsonl", rows))
    ds.check_groups()
    assert [e.split for e in ds] == ["train", "test", "validation"]
    assert ds.report.filtered == {"contexts shared across the release's splits (kept as released)": 1}


def _phantom_csv(path, rows):
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["Unnamed: 0", "query", "context", "answer", "ground_truth_label"])
        w.writeheader()
        w.writerows(rows)
    return path


def test_phantom_release_schema_and_the_10k_2000_token_split(tmp_path):
    ctx = "Item 7. Revenue was 5,000,000 in 2023. " + "Filler text of the filing. " * 20
    rows = [
        {"Unnamed: 0": 0, "query": "What was revenue?", "context": ctx, "answer": "5 million",
         "ground_truth_label": "not hallucination"},
        {"Unnamed: 0": 1, "query": "What was revenue?", "context": ctx, "answer": "9 million",
         "ground_truth_label": "hallucination"},
        {"Unnamed: 0": 2, "query": "Net income?", "context": "Net income was 1,000 dollars in fiscal 2022.",
         "answer": "1,000", "ground_truth_label": "not hallucination"},
    ]  # fmt: skip
    assert PHANTOM_10K_2000 == phantom_file("10k", 2000, "middle")
    assert PHANTOM_10K_2000 == "PhantomDataset/Phantom_10k_2000tokens_middle.csv"
    assert phantom_file("def14a", "seed") == "PhantomDataset/Phantom_def14a_seed.csv"
    (tmp_path / "PhantomDataset").mkdir()
    _phantom_csv(tmp_path / PHANTOM_10K_2000, rows)
    ph = build_phantom(tmp_path)  # the dataset folder: the paper's split is read by default
    assert [(e.id, e.question, e.answer, e.label) for e in ph] == [
        ("phantom-0", "What was revenue?", "5 million", 0),
        ("phantom-1", "What was revenue?", "9 million", 1),
        ("phantom-2", "Net income?", "1,000", 0),
    ]
    assert ph[0].group == ph[1].group != ph[2].group
    ph.check_groups()
    assert [e.id for e in build_phantom(tmp_path / PHANTOM_10K_2000)] == [e.id for e in ph]
    with pytest.raises(FileNotFoundError, match="Phantom_10k_5000tokens_end.csv"):
        build_phantom(tmp_path, file=phantom_file("10k", 5000, "end"))
    with pytest.raises(ValueError, match="position"):
        phantom_file("10k", 2000, "centre")
    fields = FieldMap(
        context=("context",), question=("query",), answer=("query",), label=("ground_truth_label",)
    )
    custom = build_phantom(tmp_path, fields=fields)
    assert custom[0].answer == "What was revenue?"


def test_support_label_conversion(tmp_path):
    assert (supported_to_label(1), supported_to_label(0)) == (0, 1)
    with pytest.raises(ValueError, match="unknown label"):
        supported_to_label(2)
    path = _jsonl(
        tmp_path / "lfqa.jsonl",
        [
            {"dataset": "LFQA", "doc": "D", "claim": "C1", "label": 1, "question": "Q", "question_id": 7},
            {"dataset": "LFQA", "doc": "D", "claim": "C2", "label": 0, "question": "Q", "question_id": 7},
            {"dataset": "LFQA", "doc": "D", "claim": "C3", "label": "yes", "question": "Q", "question_id": 8},
        ],
    )
    ds = build_claims("lfqa", path)
    assert [(e.answer, e.label, e.group) for e in ds] == [("C1", 0, "lfqa:q7"), ("C2", 1, "lfqa:q7")]
    assert ds.report.drops[0].field == "label"


def test_named_claim_builders_match_build_claims(tmp_path):
    from halubench_data import builders

    path = _jsonl(tmp_path / "x.jsonl", [{"doc": "D", "claim": "C", "label": 1, "question": "Q"}])
    for name in ("claimverify", "expertqa"):
        named = getattr(builders, f"build_{name}")(path)
        assert named.examples == build_claims(name, path).examples
        assert named[0].source == name and named[0].label == 0
