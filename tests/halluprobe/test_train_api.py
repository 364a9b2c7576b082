"""halluprobe.train: a detector from lists of dicts or a Dataset in one call, on a tiny random proxy."""

import halluprobe
import numpy as np
import pytest
from halubench_data import Dataset, Example

DEGENERATE = "ignore::halluprobe.training._calibration.DegenerateFitWarning"
WORDS = ["amber", "basil", "kelp", "oak", "river", "stone", "kite", "jay", "seed", "moss"]


def rows(n, seed=0):
    """``n`` labelled dicts: a supported answer copies a context word, a hallucinated one does not."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        context = " ".join(rng.choice(WORDS[:6], 4))
        answer = str(rng.choice(context.split())) if i % 2 == 0 else str(rng.choice(WORDS[6:]))
        out.append({"context": context, "question": "which?", "answer": answer, "label": i % 2})
    return out


@pytest.mark.slow
@pytest.mark.filterwarnings(DEGENERATE)  # a random proxy and 40 rows: the probe has little to learn
def test_train_from_dicts_ranks_heads_splits_and_saves(char_proxy, tmp_path):
    data = rows(40)
    det = halluprobe.train(data, feature_set="A7L9", batch_size=64, cache=tmp_path / "cache")
    assert isinstance(det, halluprobe.Detector) and det.probe_.feature_set == "A7L9"
    assert 1 <= det.probe_.selection["K"] <= 8  # A7's heads chosen from the proxy's induction ranking
    texts = [(r["context"], r["question"], r["answer"]) for r in data[:6]]
    proba = det.predict_proba(texts)
    assert proba.shape == (6, 2)
    np.testing.assert_allclose(proba.sum(1), 1.0)
    again = halluprobe.load(det.save(tmp_path / "d"))
    again._extractor = det._extractor  # the same proxy object (the fixture's loader builds no other)
    np.testing.assert_allclose(again.predict_proba(texts), proba)
    assert any((tmp_path / "cache").iterdir())  # records kept for the next call
    twin = halluprobe.train(data, feature_set="A7L9", batch_size=64, cache=tmp_path / "cache")
    np.testing.assert_allclose(twin.predict_proba(texts), proba)  # deterministic, from the cache


@pytest.mark.slow
@pytest.mark.filterwarnings(DEGENERATE)
def test_train_from_a_dataset_uses_its_splits_and_never_reads_test(char_proxy):
    examples = [
        Example(f"e{i}", "src", r["context"], r["question"], r["answer"], r["label"], f"g{i // 2}",
                split="validation" if i >= 28 else "train")
        for i, r in enumerate(rows(40, seed=1))
    ]  # fmt: skip
    # a test example longer than the proxy's positions: reading it would raise
    examples.append(Example("t0", "src", "w " * 5000, "", "x", 1, "gt", split="test"))
    det = halluprobe.train(Dataset(tuple(examples)), feature_set="L9", batch_size=64)
    assert det.probe_.feature_set == "L9" and np.isfinite(det.probe_.threshold)


def test_bad_examples_fail_before_the_proxy_loads():
    with pytest.raises(ValueError, match="example 0: .*label"):
        halluprobe.train([{"context": "c", "answer": "a"}])
    with pytest.raises(ValueError, match="example 1: expected a halubench_data.Example or a mapping"):
        halluprobe.train([{"context": "c", "answer": "a", "label": 1}, "text"])
    mixed = [
        {"context": "c", "answer": "a", "label": 1, "split": "train"},
        {"context": "c", "answer": "b", "label": 0},
    ]
    with pytest.raises(ValueError, match="some examples have a split and others none"):
        halluprobe.train(mixed)
    with pytest.raises(ValueError, match="no validation split"):
        halluprobe.train([{**mixed[0]}, {**mixed[1], "split": "train"}])
    with pytest.raises(ValueError, match="unknown|feature"):
        halluprobe.train(rows(4), feature_set="Z9")
    with pytest.raises(ValueError, match="no examples"):
        halluprobe.train([])
