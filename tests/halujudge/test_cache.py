import json

import pytest
from halujudge import ScoreCache, text_hash


def test_round_trip_and_keys(tmp_path):
    path = tmp_path / "sub" / "cache.jsonl"
    cache = ScoreCache(path)
    assert len(cache) == 0 and not path.exists()
    cache.put_many([("m", "strict", "a", text_hash("x"), 0.25), ("m", "plain", "a", text_hash("x"), 0.75)])
    again = ScoreCache(path)
    assert again.get("m", "strict", "a", text_hash("x")) == 0.25
    assert again.get("m", "plain", "a", text_hash("x")) == 0.75
    assert again.get("m", "strict", "a", text_hash("y")) is None  # changed text: not a hit
    assert again.get("other", "strict", "a", text_hash("x")) is None
    assert not again.dropped_partial


def test_partial_last_line_is_reported_and_removed(tmp_path):
    path = tmp_path / "cache.jsonl"
    ScoreCache(path).put_many([("m", "t", "a", "h", 0.5)])
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"model": "m", "method": "t", "id": "b", "text_h')  # an interrupted append
    cache = ScoreCache(path)
    assert cache.dropped_partial and len(cache) == 1
    cache.put_many([("m", "t", "b", "h", 0.125)])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a", "b"]
    assert not ScoreCache(path).dropped_partial


def test_malformed_middle_line_is_an_error(tmp_path):
    path = tmp_path / "cache.jsonl"
    path.write_text(
        '{"model": "m"}\n{"model": "m", "method": "t", "id": "a", "text_hash": "h", "score": 1}\n'
    )
    with pytest.raises(ValueError, match=r"cache.jsonl:1: malformed cache line"):
        ScoreCache(path)


def test_non_finite_scores_are_refused(tmp_path):
    with pytest.raises(ValueError, match="expected a finite number"):
        ScoreCache(tmp_path / "c.jsonl").put_many([("m", "t", "a", "h", float("nan"))])
