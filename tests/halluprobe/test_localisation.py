"""halluprobe.localisation: span decoding, the character span metric, the token probe, offsets."""

import itertools

import numpy as np
import pytest
from halluprobe.localisation._localisation import (
    TokenExample,
    char_mask,
    choose_decoding,
    choose_span_threshold,
    close_gaps,
    context_features,
    decode_spans,
    evaluate_spans,
    fit_token_probe,
    fit_token_probe_cv,
    group_folds,
    smooth_scores,
    span_counts,
    span_prf,
    token_offsets,
)
from halluprobe.localisation._spans import _CharIndex
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


PLAIN = {"windows": (0,), "smooths": (0,), "gaps": (0,)}
"""The plain token probe: the token's own features, no smoothing, no gap merging."""


def _example(gold_tokens, signal, rng, width, group, strength=2.0, noise=1.0):
    """Tokens of ``width`` characters; feature 0 is ``strength`` on ``signal`` tokens plus noise."""
    a = len(gold_tokens)
    feats = np.stack([signal * strength + rng.normal(0, noise, a), rng.normal(size=a)], 1)
    offsets = np.stack([np.arange(a) * width, np.arange(a) * width + width], 1)
    return TokenExample(feats.astype(np.float32), offsets, np.repeat(gold_tokens, width), group)


def _synthetic(n, rng, noise=1.0):
    out = []
    for i in range(n):
        gold_tokens = rng.random(6) < 0.3
        out.append(_example(gold_tokens, gold_tokens, rng, 4, f"g{i // 2}", noise=noise))
    return out


def test_token_probe_fits_with_the_protocol_and_localises():
    rng = np.random.default_rng(0)
    train, val, test = _synthetic(80, rng), _synthetic(30, rng), _synthetic(30, rng)
    probe = fit_token_probe(train, val, **PLAIN)
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


def test_group_folds_keep_groups_together_and_balanced():
    rng = np.random.default_rng(3)
    exs = _synthetic(40, rng)  # 20 groups of two answers
    fold = group_folds(exs, 5)
    by_group = {}
    for e, f in zip(exs, fold, strict=True):
        by_group.setdefault(e.group, set()).add(int(f))
    assert all(len(v) == 1 for v in by_group.values())
    assert sorted(np.bincount(fold).tolist()) == [8] * 5
    np.testing.assert_array_equal(fold, group_folds(exs, 5))  # seeded
    assert not np.array_equal(fold, group_folds(exs, 5, seed=7))
    with pytest.raises(ValueError, match="needs at least 2 folds and 30 groups, got 20"):
        group_folds(exs, 30)


def test_cv_token_probe_chooses_on_out_of_fold_scores_and_fits_on_everything():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(4)
    seen, test = _synthetic(80, rng, noise=1.5), _synthetic(30, rng)
    probe = fit_token_probe_cv(seen, folds=4, cs=(0.01, 1.0), windows=(0, 2), smooths=(0, 1), gaps=(0, 1))
    assert probe.window in (0, 2) and probe.C in (0.01, 1.0) and probe.coef[0] > 0
    # the choices are those of the out-of-fold scores, recomputed here by hand for the chosen setting
    fold = group_folds(seen, 4)
    oof = [None] * len(seen)
    for k in range(4):
        tr = [e for e, f in zip(seen, fold, strict=True) if f != k]
        x = np.concatenate([context_features(e.features, probe.window) for e in tr])
        y = np.concatenate([e.labels for e in tr])
        mu, sd = x.mean(0), x.std(0)
        lr = LogisticRegression(C=probe.C, class_weight="balanced", max_iter=500).fit((x - mu) / sd, y)
        for i in np.flatnonzero(fold == k):
            oof[i] = lr.decision_function((context_features(seen[i].features, probe.window) - mu) / sd)
    sm, gap, thr, _ = choose_decoding(seen, oof, smooths=(0, 1), gaps=(0, 1))
    assert (probe.smooth, probe.gap) == (sm, gap) and probe.threshold == pytest.approx(thr, rel=1e-4)
    # the returned probe is fitted on every answer with the chosen window and C
    x = np.concatenate([context_features(e.features, probe.window) for e in seen])
    y = np.concatenate([e.labels for e in seen])
    full = LogisticRegression(C=probe.C, class_weight="balanced", max_iter=500).fit(
        (x - x.mean(0)) / x.std(0), y
    )
    np.testing.assert_allclose(probe.coef, full.coef_[0], rtol=1e-4, atol=1e-6)
    res = evaluate_spans(test, [probe.decision_function(e.features) for e in test], probe.threshold,
                         n_bootstrap=20, gap=probe.gap)  # fmt: skip
    assert res.token_auroc > 0.8 and res.span_f1 > 0.5
    with pytest.raises(ValueError, match="needs at least 2 folds and 99 groups"):
        fit_token_probe_cv(seen, folds=99)
    flat = [TokenExample(e.features, e.offsets, np.zeros_like(e.gold), e.group) for e in seen]
    with pytest.raises(ValueError, match="hallucinated and supported training tokens"):
        fit_token_probe_cv(flat, folds=4)


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


class _ByteTokenizer:
    """Byte-level BPE: each id is a byte string, and a token that splits a character decodes to U+FFFD."""

    def __init__(self, pieces):
        self.pieces = pieces

    def decode(self, ids, clean_up_tokenization_spaces=False):
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", errors="replace")


def test_token_offsets_do_not_drift_after_tokens_that_split_a_character():
    answer = "东京 🎉 in Rome."
    raw = answer.encode()  # 东 and 京 are 3 bytes each, 🎉 4 bytes
    cuts = [0, 2, 4, 6, 7, 9, 11, 12, 15, 19, len(raw)]  # tokens straddle character boundaries
    tok = _ByteTokenizer([raw[a:b] for a, b in itertools.pairwise(cuts)])
    off = token_offsets(tok, answer, range(len(cuts) - 1))
    texts = [answer[a:b] for a, b in off]
    # every token maps to the characters its bytes belong to; the ASCII tail is exact
    assert texts == ["东", "东京", "京", " ", "🎉", "🎉", " ", "in ", "Rome", "."]
    spans = decode_spans(off, np.array([0, 0, 0, 0, 0, 0, 0, 0, 1, 0]), 0.5, len(answer))
    assert [answer[sp.start : sp.end] for sp in spans] == ["Rome"]


def test_token_probe_scores_equal_scikit_learn_to_the_last_bit():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(2)
    train, val = _synthetic(60, rng), _synthetic(20, rng)
    probe = fit_token_probe(train, val, **PLAIN)
    x = np.concatenate([e.features for e in train])
    y = np.concatenate([e.labels for e in train])
    lr = LogisticRegression(C=probe.C, class_weight="balanced", max_iter=500).fit(
        (x - probe.mean) / probe.scale, y
    )
    for e in val:
        got = probe.decision_function(e.features)
        np.testing.assert_array_equal(got, lr.decision_function((e.features - probe.mean) / probe.scale))
        assert got.dtype == np.float32


def test_context_features_window_mean_answer_mean_and_position():
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    assert context_features(x, 0) is x or np.array_equal(context_features(x, 0), x)
    c = context_features(x, 1)
    assert c.shape == (5, 7) and c.dtype == np.float32
    np.testing.assert_array_equal(c[:, :2], x)
    np.testing.assert_allclose(c[0, 2:4], x[:2].mean(0))  # clipped at the start
    np.testing.assert_allclose(c[2, 2:4], x[1:4].mean(0))
    np.testing.assert_allclose(c[:, 4:6], np.broadcast_to(x.mean(0), (5, 2)))
    np.testing.assert_allclose(c[:, 6], [0, 0.25, 0.5, 0.75, 1.0])


def test_smoothing_and_gap_closing():
    np.testing.assert_allclose(smooth_scores(np.array([0.0, 3.0, 0.0, 0.0]), 1), [1.5, 1.0, 1.0, 0.0])
    s = np.array([1.0, 2.0])
    assert smooth_scores(s, 0) is s
    f = np.array([1, 0, 0, 1, 0, 1, 0], dtype=bool)
    np.testing.assert_array_equal(close_gaps(f, 1), [1, 0, 0, 1, 1, 1, 0])
    np.testing.assert_array_equal(close_gaps(f, 2), [1, 1, 1, 1, 1, 1, 0])
    np.testing.assert_array_equal(close_gaps(f, 0), f)
    assert not close_gaps(np.zeros(3, bool), 5).any()
    sc = np.array([0.9, 0.1, 0.8, 0.0, 0.0])
    assert decode_spans(OFFSETS, sc, 0.5, 18, gap=1) == (Span(0, 12, "hallucination"),)


@pytest.mark.parametrize("gap", [0, 2])
def test_fast_char_index_equals_the_per_answer_counts(gap):
    rng = np.random.default_rng(3)
    exs = _synthetic(25, rng)
    # overlapping and out-of-range offsets too: the union of characters must still be exact
    exs[0] = TokenExample(exs[0].features, np.array([[0, 6], [4, 8], [8, 30], [12, 16], [16, 20], [20, 24]]),
                          exs[0].gold, exs[0].group)  # fmt: skip
    scores = [rng.normal(size=len(e.offsets)) for e in exs]
    index = _CharIndex(exs)
    for thr in (-0.5, 0.0, 0.7):
        slow = float(span_prf(span_counts(exs, scores, thr, gap).sum(0))[2])
        assert index.f1(index.flags(np.concatenate(scores), thr, gap)) == slow


def _spotty(n, rng):
    """Hallucinated runs of 4 tokens whose middle tokens carry no signal of their own."""
    out = []
    for i in range(n):
        lab = np.zeros(24, bool)
        if i % 2 == 0:
            s0 = int(rng.integers(0, 20))
            lab[s0 : s0 + 4] = True
        out.append(_example(lab, lab & (rng.random(24) < 0.5), rng, 3, f"g{i}", strength=3.0, noise=0.5))
    return out


@pytest.mark.slow  # the full grid of windows, smooths, gaps; the tests above fit and decode one
def test_context_window_and_decoding_are_chosen_on_validation_and_help():
    rng = np.random.default_rng(4)
    train, val, test = _spotty(120, rng), _spotty(60, rng), _spotty(60, rng)
    plain = fit_token_probe(train, val, **PLAIN)
    rich = fit_token_probe(train, val, windows=(0, 2), smooths=(0, 1, 2), gaps=(0, 1, 3))
    assert rich.window == 2 and rich.val_auroc > plain.val_auroc
    raw = [
        fit_token_probe(train, val, windows=(rich.window,), smooths=(0,), gaps=(0,)).decision_function(
            e.features
        )
        for e in val
    ]
    sm, gap, thr, f1 = choose_decoding(val, raw, smooths=(0, 1, 2), gaps=(0, 1, 3))
    assert (sm, gap, thr) == (rich.smooth, rich.gap, rich.threshold)
    res = [
        evaluate_spans(
            test, [p.decision_function(e.features) for e in test], p.threshold, gap=p.gap, n_bootstrap=10
        )  # fmt: skip
        for p in (plain, rich)
    ]
    assert res[1].span_f1 > res[0].span_f1 and res[1].token_auroc > res[0].token_auroc
    spans = rich.spans(test[0].features, test[0].offsets, len(test[0].gold))
    assert spans == decode_spans(
        test[0].offsets, rich.decision_function(test[0].features), rich.threshold, len(test[0].gold), rich.gap
    )
