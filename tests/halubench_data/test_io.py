import json

import pytest
from halubench_data import Dataset, Example, Span, read_jsonl, write_jsonl


def _ex(i, label=0, split="train", group=None, answer="Paris is the capital."):
    return Example(
        id=f"e{i}",
        source="toy",
        context="Paris is the capital of France.",
        question="What is the capital?",
        answer=answer,
        label=label,
        group=group or f"g{i}",
        split=split,
        spans=(Span(0, 5),) if label else (),
        meta={"kind": "x"},
    )


def test_round_trip_keeps_every_field(tmp_path):
    ds = Dataset((_ex(0), _ex(1, label=1, split="test"), _ex(2, split=None)), "toy")
    path = write_jsonl(ds, tmp_path / "d.jsonl")
    back = read_jsonl(path)
    assert back.examples == ds.examples
    assert back.report.n_read == 3 and back.report.n_kept == 3 and back.report.n_dropped == 0


def test_never_overwrites_unless_asked(tmp_path):
    path = tmp_path / "d.jsonl"
    write_jsonl([_ex(0)], path)
    with pytest.raises(FileExistsError, match="overwrite"):
        write_jsonl([_ex(1)], path)
    assert read_jsonl(path)[0].id == "e0"
    write_jsonl([_ex(1)], path, overwrite=True)
    assert read_jsonl(path)[0].id == "e1"
    assert [p.name for p in tmp_path.iterdir()] == ["d.jsonl"]  # no temp file left behind


def test_failed_write_leaves_old_file(tmp_path):
    path = tmp_path / "d.jsonl"
    write_jsonl([_ex(0)], path)

    def bad():
        yield _ex(1)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_jsonl(bad(), path, overwrite=True)
    assert read_jsonl(path)[0].id == "e0"
    assert len(list(tmp_path.iterdir())) == 1


BAD_LINES = [
    ("{not json", "<json>"),
    (
        json.dumps({"id": "x", "source": "s", "context": "c", "question": "q", "label": 0, "group": "g"}),
        "answer",
    ),
    (
        json.dumps(
            {
                "id": "x",
                "source": "s",
                "context": "c",
                "question": "q",
                "answer": "a",
                "label": 2,
                "group": "g",
            }
        ),
        "label",
    ),
    (
        json.dumps(
            {
                "id": "x",
                "source": "s",
                "context": "c",
                "question": "q",
                "answer": "  ",
                "label": 0,
                "group": "g",
            }
        ),
        "answer",
    ),
    (
        json.dumps(
            {
                "id": "x",
                "source": "s",
                "context": "c",
                "question": "q",
                "answer": "a",
                "label": 0,
                "group": "g",
                "split": "dev",
            }
        ),
        "split",
    ),
    (
        json.dumps(
            {
                "id": "x",
                "source": "s",
                "context": "c",
                "question": "q",
                "answer": "ab",
                "label": 1,
                "group": "g",
                "spans": [{"start": 0, "end": 9}],
            }
        ),
        "spans",
    ),
    ("[1, 2]", "<json>"),
    (  # a lone surrogate escape: not a character, no tokenizer can encode it
        '{"id": "x", "source": "s", "context": "c", "question": "q", "answer": "a \\ud800 b", "label": 1, '
        '"group": "g"}',
        "answer",
    ),
]


@pytest.mark.parametrize(("line", "field"), BAD_LINES)
def test_bad_line_names_file_line_and_field(tmp_path, line, field):
    good = json.dumps(
        {"id": "ok", "source": "s", "context": "c", "question": "q", "answer": "a", "label": 0, "group": "g"}
    )
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n\n" + line + "\n")
    with pytest.raises(ValueError, match=rf"bad\.jsonl:3: field '{field}'"):
        read_jsonl(path)
    ds = read_jsonl(path, errors="drop")
    assert len(ds) == 1 and ds.report.n_read == 2 and ds.report.n_dropped == 1
    (drop,) = ds.report.drops
    assert (drop.line, drop.field) == (3, field)
    assert "dropped 1" in ds.report.summary()


def test_duplicate_id_is_reported(tmp_path):
    path = write_jsonl([_ex(0)], tmp_path / "a.jsonl")
    path.write_text(path.read_text() * 2)
    ds = read_jsonl(path, errors="drop")
    assert len(ds) == 1 and ds.report.drops[0].field == "id"


def test_dataset_views_and_checks():
    ds = Dataset((_ex(0), _ex(1, 1, "validation"), _ex(2, 0, "test"), _ex(3, 1, "test")))
    assert [len(ds.train), len(ds.validation), len(ds.test)] == [1, 1, 2]
    assert ds.test.labels.tolist() == [0, 1]
    ds.check_groups()
    crossing = Dataset((_ex(0, group="g"), _ex(1, split="test", group="g")))
    with pytest.raises(ValueError, match="crosses splits"):
        crossing.check_groups()
    with pytest.raises(ValueError, match="duplicate example ids"):
        Dataset((_ex(0), _ex(0)))
    assert "| toy | 1 | 0 | 1 | 1 | 2 |" in ds.stats_table()
    moved = ds.with_splits({"g0": "test", "g1": "test", "g2": "test", "g3": "train"})
    assert [e.split for e in moved] == ["test", "test", "test", "train"]
    with pytest.raises(ValueError, match="no split given"):
        ds.with_splits({"g0": "test"})


def test_example_validates():
    with pytest.raises(ValueError, match="label"):
        _ex(0, label=3)
    with pytest.raises(ValueError, match="split"):
        _ex(0, split="dev")
    with pytest.raises(ValueError, match="lies outside the"):
        Example("i", "s", "c", "q", "ab", 1, "g", spans=(Span(0, 5),))
    with pytest.raises(ValueError, match="start < end"):
        Span(3, 3)


def test_a_utf8_bom_and_crlf_line_ends_are_read(tmp_path):
    from halubench_data import build_default
    from halubench_data.io import example_to_dict

    ds = build_default(n_contexts=2, questions_per_context=1)
    lines = [json.dumps(example_to_dict(ex), ensure_ascii=False) for ex in ds.examples]
    path = tmp_path / "windows.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n")  # as Notepad saves it
    assert read_jsonl(path).examples == ds.examples
