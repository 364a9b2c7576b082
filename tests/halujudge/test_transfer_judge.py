"""`halluprobe transfer --judge`: every template scored by the proxy, the scores kept in OUT/cache.jsonl."""

import numpy as np
import pytest
from halluprobe.pipeline._judge import judge_scores
from halubench_data import Dataset, Example
from halujudge import LLMJudge


def _dataset() -> Dataset:
    rows = [("the cat sat on the mat", "where did the cat sit", "on the mat", 0),
            ("the dog ran in the park", "where did the dog run", "in the house", 1)]  # fmt: skip
    return Dataset(
        tuple(Example(f"x{i}", "s", c, q, a, y, f"g{i}", "test") for i, (c, q, a, y) in enumerate(rows))
    )


def test_judge_scores_equal_the_judge_and_are_cached(tiny_qwen2, tiny_tokenizer, tmp_path, monkeypatch):
    ds = _dataset()

    def scores(*templates):
        return judge_scores(tiny_qwen2, tiny_tokenizer, [ds], out=tmp_path, templates=templates, batch_size=2)

    got = scores("plain", "strict")
    assert list(got) == ["plain", "strict"]
    for name, per in got.items():
        direct = LLMJudge(tiny_qwen2, tiny_tokenizer, name, model_id="default").score(
            ds.examples, progress=False
        )
        np.testing.assert_allclose([per[e.id] for e in ds], direct, rtol=1e-12)
    assert (tmp_path / "cache.jsonl").exists()

    def no_forward(self, batch):
        raise AssertionError("a cached score was computed again")

    monkeypatch.setattr(LLMJudge, "_forward", no_forward)
    assert scores("plain", "strict") == got
    with pytest.raises(AssertionError, match="computed again"):  # a template not in the cache is scored
        scores("claims")
