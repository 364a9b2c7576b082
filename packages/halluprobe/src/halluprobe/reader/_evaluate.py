"""A fitted reader on labelled test answers: answer AUROC and F1, false alarms, character span F1."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["evaluate_reader"]


def evaluate_reader(
    reader, examples: Sequence[Any], *, n_bootstrap: int = 1000, seed: int = 42
) -> dict[str, Any]:
    """Test metrics of ``reader`` on labelled examples (`halluprobe.reader.as_examples` rows).

    Returns a JSON-ready mapping: ``n``, ``n_positive``, ``auroc`` with its group-bootstrap interval,
    ``f1``, ``precision``, ``recall`` and ``false_alarm_rate`` (the share of supported answers flagged)
    at the reader's threshold; and, when some hallucinated answer has annotated spans, the character
    span precision, recall and F1 (with interval) of the reader's spans over the answers that are
    supported or annotated (`halluprobe.localisation` measures spans the same way).
    """
    from halubench_data.metrics import evaluate

    from halluprobe._numeric import sigmoid

    rows = list(examples)
    triples = [(e.context, e.question, e.answer) for e in rows]
    scored = reader.token_logits(triples)
    s = reader.scoring_
    probs = sigmoid(s.logit(s.raw([z for _, _, z in scored], triples)))
    y = np.array([e.label for e in rows])
    groups = [str(e.group) for e in rows]
    res = evaluate(probs, y, groups, s.threshold, n_bootstrap=n_bootstrap, seed=seed)
    flagged = probs >= s.threshold
    out: dict[str, Any] = {
        "n": len(rows), "n_positive": int(y.sum()), "auroc": res.auroc, "auroc_ci": list(res.auroc_ci),
        "f1": res.f1, "precision": res.precision, "recall": res.recall, "threshold": s.threshold,
        "false_alarm_rate": float(flagged[y == 0].mean()) if np.any(y == 0) else float("nan"),
    }  # fmt: skip
    out.update(_span_metrics(reader, rows, scored, n_bootstrap, seed))
    return out


def _span_metrics(reader, rows, scored, n_bootstrap: int, seed: int) -> dict[str, Any]:
    from halluprobe.features._token_data import TokenExample, char_mask, token_offsets
    from halluprobe.localisation._spans import evaluate_spans

    keep = [i for i, e in enumerate(rows) if e.label == 0 or e.spans]
    if not any(rows[i].spans for i in keep):
        return {}
    tok = reader.extractor().tokenizer
    examples, scores = [], []
    for i in keep:
        e, (ids, start, z) = rows[i], scored[i]
        offsets = token_offsets(tok, e.answer, ids[start:])
        gold = char_mask(e.spans, len(e.answer)) if e.label == 1 else np.zeros(len(e.answer), bool)
        examples.append(TokenExample(np.zeros((len(offsets), 0), np.float32), offsets, gold, str(e.group)))
        scores.append(np.asarray(z, np.float64))
    s = reader.scoring_
    res = evaluate_spans(
        examples, scores, s.span_threshold, n_bootstrap=n_bootstrap, seed=seed, gap=s.span_gap
    )
    return {
        "span_answers": res.n_answers, "token_auroc": res.token_auroc, "span_precision": res.span_precision,
        "span_recall": res.span_recall, "span_f1": res.span_f1, "span_f1_ci": list(res.span_f1_ci),
    }  # fmt: skip
