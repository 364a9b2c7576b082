"""halluprobe.localisation: span decoding, the character span metric, the token probe, offsets."""

import numpy as np
import pytest
from halluprobe.localisation import (
    TokenExample,
    char_mask,
    choose_span_threshold,
    decode_spans,
    evaluate_spans,
    fit_token_probe,
    span_counts,
    span_prf,
    token_offsets,
)
from halubench_data import Span

# "Ada lives in Rome." as 5 tokens
OFFSETS = np.array([[0, 3], [3, 9], [9, 12], [12, 17], [17, 18]])


def test_decode_spans_merges_adjacent_flagged_tokens():
    scores = np.array([0.9, 0.1, 0.5, 0.7, 0.2])
    assert decode_spans(OFFSETS, scores, 0.5, 18) == (
        Span(0, 3, "hallucination"),
        Span(9, 17, "hallucination"),
    )
    assert decode_spans(OFFSETS, scores, 0.95, 18) == ()
    assert decode_spans(OFFSETS, np.ones(5), 1.0, 18) == (Span(0, 18, "hallucination"),)
    with pytest.raises(ValueError, match=r"offsets must be \[A, 2\] for 4 scores"):
        decode_spans(OFFSETS, np.ones(4), 0.5, 18)


def test_span_metric_counts_characters_micro_averaged():
    gold_a = char_mask([Span(12, 17)], 18)  # "Rome" with its space: 5 characters
    gold_b = char_mask([], 18)
    exs = [TokenExample(np.zeros((5, 1)), OFFSETS, gold_a), TokenExample(np.zeros((5, 1)), OFFSETS, gold_b)]
    np.testing.assert_array_equal(exs[0].labels, [0, 0, 0, 1, 0])
    scores = [np.array([0, 0, 1, 1, 0.0]), np.array([1, 0, 0, 0, 0.0])]
    counts = span_counts(exs, scores, 0.5)
    np.testing.assert_array_equal(counts, [[5, 8, 5], [0, 3, 0]])
    p, r, f = span_prf(counts.sum(0))
    assert (p, r) == (5 / 11, 1.0) and f == pytest.approx(2 * (5 / 11) / (5 / 11 + 1))
    assert tuple(span_prf(np.zeros(3))) == (0.0, 0.0, 0.0)


def _synthetic(n, rng, noise=1.0):
    out = []
    for i in range(n):
        a = 6
        gold_tokens = rng.random(a) < 0.3
        feats = np.stack([gold_tokens * 2.0 + rng.normal(0, noise, a), rng.normal(size=a)], 1).astype(
            np.float32
        )
        offsets = np.stack([np.arange(a) * 4, np.arange(a) * 4 + 4], 1)
        gold = np.zeros(a * 4, dtype=bool)
        for t in np.flatnonzero(gold_tokens):
            gold[t * 4 : t * 4 + 4] = True
        out.append(TokenExample(feats, offsets, gold, f"g{i // 2}"))
    return out


def test_token_probe_fits_with_the_protocol_and_localises():
    rng = np.random.default_rng(0)
    train, val, test = _synthetic(80, rng), _synthetic(30, rng), _synthetic(30, rng)
    probe = fit_token_probe(train, val)
    assert probe.C in (0.01, 0.1, 1.0) and probe.val_auroc > 0.8 and probe.coef[0] > 0
    proba = probe.predict_proba(test[0].features)
    assert proba.shape == (6, 2) and np.allclose(proba.sum(1), 1.0)
    scores = [probe.decision_function(e.features) for e in test]
    assert probe.threshold == choose_span_threshold(val, [probe.decision_function(e.features) for e in val])
    res = evaluate_spans(test, scores, probe.threshold, n_bootstrap=50)
    assert res.token_auroc > 0.8 and res.span_f1 > 0.5 and res.n_answers == 30 and res.n_groups == 15
    assert res.token_auroc_ci[0] <= res.token_auroc <= res.token_auroc_ci[1]
    spans = probe.spans(test[0].features, test[0].offsets, len(test[0].gold))
    assert all(isinstance(s, Span) for s in spans)
    perfect = evaluate_spans(test, [e.labels.astype(float) for e in test], 0.5, n_bootstrap=20)
    assert perfect.span_f1 == 1.0 and perfect.token_auroc == 1.0 and perfect.token_f1 == 1.0


def test_token_probe_needs_positive_training_tokens():
    rng = np.random.default_rng(1)
    flat = [TokenExample(e.features, e.offsets, np.zeros_like(e.gold), e.group) for e in _synthetic(5, rng)]
    with pytest.raises(ValueError, match="hallucinated and supported training tokens"):
        fit_token_probe(flat, flat)


class _PieceTokenizer:
    """Decodes ids to fixed text pieces, like a BPE tokenizer with leading-space tokens."""

    pieces = {1: " Ada", 2: " lives", 3: " in", 4: " Rome", 5: "."}

    def decode(self, ids, clean_up_tokenization_spaces=False):
        return "".join(self.pieces[i] for i in ids)


def test_token_offsets_follow_the_decoded_pieces():
    off = token_offsets(_PieceTokenizer(), " Ada lives in Rome.", [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(off, [[0, 4], [4, 10], [10, 13], [13, 18], [18, 19]])
    stripped = token_offsets(_PieceTokenizer(), "Ada lives", [1, 2])  # the answer lost its leading space
    np.testing.assert_array_equal(stripped, [[0, 4], [4, 9]])
    assert off.dtype == np.int32 and token_offsets(_PieceTokenizer(), "x", []).shape == (0, 2)


def test_token_probe_scores_equal_scikit_learn_to_the_last_bit():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(2)
    train, val = _synthetic(60, rng), _synthetic(20, rng)
    probe = fit_token_probe(train, val)
    x = np.concatenate([e.features for e in train])
    y = np.concatenate([e.labels for e in train])
    lr = LogisticRegression(C=probe.C, class_weight="balanced", max_iter=500).fit(
        (x - probe.mean) / probe.scale, y
    )
    for e in val:
        got = probe.decision_function(e.features)
        np.testing.assert_array_equal(got, lr.decision_function((e.features - probe.mean) / probe.scale))
        assert got.dtype == np.float32
