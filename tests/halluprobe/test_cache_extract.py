import json
from dataclasses import dataclass

import numpy as np
import pytest
from halluprobe.features import CacheRepairWarning, FeatureCache, extract_records


@dataclass
class Ex:
    id: str
    context: str
    question: str = "q"
    answer: str = "a"


def _equal(r1, r2):
    assert r1.id == r2.id and r1.answer_len == r2.answer_len and r1.prompt_len == r2.prompt_len
    for key in (
        "head_stats",
        "sink_topk",
        "token_prev",
        "logit_pooled",
        "token_logit",
        "hidden_pooled",
        "mtopdiv",
    ):
        np.testing.assert_array_equal(getattr(r1, key), getattr(r2, key))


def test_cache_round_trip_and_order(tmp_path, record_factory):
    rng = np.random.default_rng(0)
    recs = [record_factory(f"e{i}", rng, a=2 + i, mtopdiv=i % 2 == 0) for i in range(5)]
    cache = FeatureCache(tmp_path / "c", {"proxy": "x"})
    cache.add(recs[:3])
    cache.add(recs[3:])
    again = FeatureCache(tmp_path / "c", {"proxy": "x"})
    assert len(again) == 5 and again.ids == {r.id for r in recs}
    got = again.load(["e4", "e0", "e2"])
    for g, r in zip(got, [recs[4], recs[0], recs[2]], strict=True):
        _equal(g, r)
    with pytest.raises(KeyError, match="nope"):
        again.load(["nope"])
    with pytest.raises(ValueError, match="already cached"):
        again.add([recs[0]])


def test_cache_other_settings_damage_and_format(tmp_path, record_factory):
    rng = np.random.default_rng(1)
    cache = FeatureCache(tmp_path, {"proxy": "x"})
    cache.add([record_factory("a", rng)])
    other = FeatureCache(tmp_path, {"proxy": "y"})  # other settings: other keys, nothing stale returned
    assert other.lookup([other._id_key("a")]) == {} and len(cache.lookup([cache._id_key("a")])) == 1
    shard = next(tmp_path.glob("shard-*.safetensors"))
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.warns(CacheRepairWarning, match="damaged"), pytest.raises(KeyError, match="a"):
        FeatureCache(tmp_path, {"proxy": "x"}).load()
    assert len(FeatureCache(tmp_path, {"proxy": "x"})) == 0 and not shard.exists()  # dropped, not fatal
    index = json.loads((tmp_path / "index.json").read_text())
    index["format"] = 999
    (tmp_path / "index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="format"):
        FeatureCache(tmp_path, {"proxy": "x"})


class Interrupt(Exception):
    pass


def test_interrupted_extraction_resumes_without_recomputing(tmp_path, record_factory):
    rng = np.random.default_rng(2)
    examples = [Ex(f"e{i}", "c" * (10 - i)) for i in range(7)]
    made = {ex.id: record_factory(ex.id, rng) for ex in examples}
    calls = []

    def compute(batch):
        calls.append([ex.id for ex in batch])
        if len(calls) == 3:
            raise Interrupt
        return [made[ex.id] for ex in batch]

    cache = FeatureCache(tmp_path, {"proxy": "p"})
    with pytest.raises(Interrupt):
        extract_records(examples, compute, cache, batch_size=2)
    # two batches were finished and must survive in a fresh cache object
    resumed = FeatureCache(tmp_path, {"proxy": "p"})
    assert len(resumed) == 4
    finished = {i for b in calls[:2] for i in b}
    assert resumed.ids == finished
    # batches are sorted by length: shortest contexts first
    assert calls[0] == ["e6", "e5"]
    calls.clear()
    out = extract_records(examples, lambda b: (calls.append([e.id for e in b]), [made[e.id] for e in b])[1],
                          resumed, batch_size=2)  # fmt: skip
    recomputed = {i for b in calls for i in b}
    assert recomputed == {ex.id for ex in examples} - finished
    assert [r.id for r in out] == [ex.id for ex in examples]
    for r in out:
        _equal(r, made[r.id])
    assert not list(tmp_path.glob("*.tmp"))


def test_extract_validates(tmp_path, record_factory):
    cache = FeatureCache(tmp_path, {})
    with pytest.raises(ValueError, match="batch_size"):
        extract_records([Ex("a", "c")], lambda b: [], cache, batch_size=0)
    with pytest.raises(ValueError, match="one record per example"):
        extract_records([Ex("a", "c")], lambda b: [], cache)
