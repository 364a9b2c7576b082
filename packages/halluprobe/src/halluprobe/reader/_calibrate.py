"""The choices a reader makes on its validation answers after fine-tuning (never on training answers).

Pooling (made by the fine-tuning), the overlap anchor's weight, the Platt calibration (sources weighted
the same), the threshold (a rule of `halluprobe.training.transfer_threshold`) and the span decoding
(threshold and gap with the best character span F1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from halluprobe.reader._scoring import ReaderScoring, choose_anchor
from halluprobe.training._thresholds import check_threshold_rule

__all__ = ["finish_fit", "rescored", "rule_threshold"]


def rule_threshold(rule: str, probs: np.ndarray, y: np.ndarray, sources: np.ndarray) -> float:
    """The threshold ``rule`` (`halluprobe.training.transfer_threshold`) picks from validation answers."""
    from halluprobe.training._calibration import transfer_threshold

    by_p = {s: probs[sources == s] for s in np.unique(sources)}
    by_y = {s: y[sources == s] for s in np.unique(sources)}
    return transfer_threshold(by_p, by_y, rule)


def _span_examples(tokenizer, examples: Sequence, rows: Sequence):
    from halluprobe.features._token_data import TokenExample, char_mask, token_offsets

    out = []
    for ex, row in zip(examples, rows, strict=True):
        offsets = token_offsets(tokenizer, ex.answer, row.ids[row.start :].tolist())
        gold = char_mask(ex.spans, len(ex.answer)) if ex.label == 1 else np.zeros(len(ex.answer), bool)
        out.append(TokenExample(np.zeros((len(offsets), 0), np.float32), offsets, gold, ex.group))
    return out


def _decoding(tokenizer, examples, rows, z: Sequence[np.ndarray]) -> tuple[float, int, float]:
    """``(span threshold, gap, validation span F1)``; ``(0, 0, nan)`` without an annotated span."""
    from halluprobe.localisation._spans import GAPS, choose_decoding

    has_spans = [i for i, ex in enumerate(examples) if ex.label == 0 or ex.spans]
    if not any(examples[i].spans for i in has_spans):
        return 0.0, 0, float("nan")
    ex = _span_examples(tokenizer, [examples[i] for i in has_spans], [rows[i] for i in has_spans])
    _, gap, thr, f1 = choose_decoding(ex, [z[i] for i in has_spans], smooths=(0,), gaps=GAPS)
    return float(thr), int(gap), float(f1)


def _pool_aurocs(fit) -> dict[str, float]:
    """The validation AUROC of every pooling at the fine-tuning's best evaluation."""
    best = [h for h in fit.history if h.get("step") == getattr(fit, "best_step", None)]
    row = best[0] if best else {}
    return {k.removeprefix("val_auroc_"): v for k, v in row.items() if k.startswith("val_auroc_")}


def finish_fit(est, fit, rows: Sequence, examples: Sequence, z: Sequence[np.ndarray]) -> None:
    """Set ``est.scoring_`` and ``est.validation_`` from the validation answers' token logits ``z``.

    ``fit``: what the fine-tuning chose (``pool``, ``history``, ``val_auroc`` of a
    `halluprobe.reader.ReaderFit`).
    """
    from halubench_data.grounding import overlap_score

    from halluprobe.reader._train import pooled
    from halluprobe.training._calibration import Calibrator, source_weights
    from halluprobe.training._general import mean_source_auroc

    y = np.array([e.label for e in examples])
    src = np.array([e.source for e in examples])
    s = pooled(z, fit.pool)
    anchor = None
    if est.anchor:
        overlap = np.array([overlap_score(e.context, e.question, e.answer) for e in examples])
        anchor = choose_anchor(s, overlap, y, src)
        raw = anchor(s, overlap)
    else:
        raw = s
    cal = Calibrator("platt").fit(raw, y, sample_weight=source_weights(src.tolist()))
    p = cal(raw)
    rule = check_threshold_rule(str(est.threshold_rule))
    thr = rule_threshold(rule, p, y, src)
    span_thr, gap, span_f1 = _decoding(est.extractor().tokenizer, examples, rows, z)
    est.scoring_ = ReaderScoring(fit.pool, (cal.a_, cal.b_), thr, rule, span_thr, gap, anchor)
    neg = [np.mean(p[(src == k) & (y == 0)] >= thr) for k in np.unique(src) if np.any((src == k) & (y == 0))]
    pos = [np.mean(p[(src == k) & (y == 1)] >= thr) for k in np.unique(src) if np.any((src == k) & (y == 1))]
    est.validation_ = {
        "n": len(y),
        "auroc": float(mean_source_auroc(p, y, src)),
        "reader_auroc": _pool_aurocs(fit),
        "pool_auroc_at_best": float(fit.val_auroc),
        "false_alarm_rate": float(np.mean(neg)) if neg else float("nan"),
        "recall": float(np.mean(pos)) if pos else float("nan"),
        "span_f1": span_f1,
        "note": "on the validation answers that chose the pooling, anchor, calibration and threshold",
    }


def rescored(est, X_val: Any, *, anchor: bool, threshold_rule: str | None = None):
    """A copy of a fitted reader with the choices after fine-tuning made again on ``X_val``.

    The adapters and head are shared; the overlap anchor (on or off), the calibration, the threshold
    (``threshold_rule``, default the reader's) and the span decoding are chosen on ``X_val``, which
    should be the validation answers the reader was early-stopped on (never its training answers).
    """
    import copy
    from types import SimpleNamespace

    from halluprobe.reader._data import as_examples, encode_row

    examples = as_examples(X_val, None, None)
    out = copy.copy(est)
    out.anchor = bool(anchor)
    out.threshold_rule = threshold_rule or est.threshold_rule
    tok = est.extractor().tokenizer
    rows = [encode_row(tok, e, max_positions=None) for e in examples]
    z = [t[2] for t in est.token_logits([(e.context, e.question, e.answer) for e in examples])]
    v = est.validation_
    fit = SimpleNamespace(
        pool=est.scoring_.pool, history=[], val_auroc=v.get("pool_auroc_at_best", float("nan"))
    )
    finish_fit(out, fit, rows, examples, z)
    out.validation_ = {**out.validation_, "reader_auroc": v.get("reader_auroc", {})}
    out.card_ = {**est.card_, "validation": out.validation_}
    return out
