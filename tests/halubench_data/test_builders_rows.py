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


def test_trivia_plus_and_phantom_rows(tmp_path):
    trivia = _jsonl(
        tmp_path / "trivia.jsonl",
        [
            {
                "id": "t1",
                "context": "Paris is in France.",
                "question": "Where is Paris?",
                "answer": "France",
                "label": 0,
            },
            {
                "id": "t2",
                "context": "Paris is in France.",
                "question": "Where is Paris?",
                "answer": "Spain",
                "label": 1,
            },
            {
                "id": "t3",
                "context": "Rome is in Italy.",
                "question": "Where is Rome?",
                "answer": "Italy",
                "label": "false",
            },
            {
                "id": "t4",
                "context": "Rome is in Italy.",
                "question": "Where is Rome?",
                "answer": "",
                "label": 1,
            },
        ],
    )
    ds = build_trivia_plus(trivia)
    assert [(e.id, e.label) for e in ds] == [
        ("trivia_plus-t1", 0),
        ("trivia_plus-t2", 1),
        ("trivia_plus-t3", 0),
    ]
    assert ds[0].group == ds[1].group != ds[2].group
    assert ds.report.drops[0].field == "answer" and ds.report.drops[0].line == 4
    phantom = tmp_path / "phantom.json"
    phantom.write_text(
        json.dumps(
            [
                {
                    "query": "What was revenue?",
                    "context": "Revenue was 5,000,000.",
                    "answer": "5 million",
                    "label": 0,
                    "doc_id": "A",
                },
                {
                    "query": "What was revenue?",
                    "context": "Other chunk of A.",
                    "answer": "9 million",
                    "label": 1,
                    "doc_id": "A",
                },
                {
                    "query": "Net income?",
                    "context": "Net income was 1,000.",
                    "answer": "1,000",
                    "label": 0,
                    "doc_id": "B",
                },
            ]
        )
    )
    ph = build_phantom(phantom)
    assert [e.question for e in ph][0] == "What was revenue?"
    assert ph[0].group == ph[1].group == "phantom:A" != ph[2].group
    custom = build_trivia_plus(trivia, fields=FieldMap(answer=("question",)))
    assert custom[0].answer == "Where is Paris?"


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
