"""The published detectors fitted on records, each with its setting chosen on validation (`fit_published`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from halubench_data.metrics import C_GRID, auroc, best_by_validation

from halluprobe.detectors import _published as d


def fit_published(records, labels, order, logit_names, toha: bool) -> dict[str, Callable[[list], np.ndarray]]:
    """Fit the published detectors (each picks its setting on validation); return their scorers.

    Supervised ones (Lookback Lens, SinkProbe) fit on train with ``C`` by validation AUROC; LLM-Check,
    INTRYGUE and TOHA choose their setting on validation; RAUQ has none. A scorer maps records of any
    dataset to ``[n]`` scores (higher = more likely hallucinated), so a detector fitted here can be
    tested on another dataset (transfer).
    """
    tr, va = records["train"], records["validation"]
    y_tr, y_va = labels["train"], labels["validation"]
    out: dict[str, Callable[[list], np.ndarray]] = {}

    def supervised(name, cls, matrix):
        def fit(c):
            det = cls(C=c).fit(matrix(tr), y_tr)
            return auroc(det.raw_score(matrix(va)), y_va), det

        _, _, det = best_by_validation(C_GRID, fit)  # fit on train, C by validation AUROC (ties: smaller C)
        out[name] = lambda recs: det.raw_score(matrix(recs))

    def chosen_on_validation(name, det, matrix):
        det.fit(matrix(va), y_va)
        out[name] = lambda recs: det.raw_score(matrix(recs))

    supervised("LookbackLens", d.LookbackLens, d.lookback_matrix)
    chosen_on_validation("LookbackLens (<=10 heads)", d.LookbackLensHeads(), d.lookback_matrix)
    supervised("SinkProbe", d.SinkProbe, lambda r: d.sink_matrix(r, 1))
    chosen_on_validation("LLM-Check", d.LLMCheckAttention(), d.logdiag_matrix)
    ent = logit_names.index("entropy")
    chosen_on_validation("INTRYGUE", d.INTRYGUE(head_order=order), lambda r: d.intrygue_matrix(r, ent))
    chosen_on_validation(
        "INTRYGUE sink rate", d.SinkRate(head_order=order), lambda r: d.intrygue_matrix(r, ent)
    )
    if toha:
        chosen_on_validation("TOHA", d.TOHA(), d.toha_matrix)
    rauq, lp = d.RAUQ().fit(), logit_names.index("answer_logprob")
    out["RAUQ"] = lambda recs: rauq.raw_score(d.rauq_matrix(recs, lp))
    return out


def published_scores(records, labels, order, logit_names, toha: bool) -> dict[str, dict[str, np.ndarray]]:
    """Validation and test scores of the published detectors (`fit_published`).

    Returns:
        dict[str, dict[str, np.ndarray]]: ``{name: {"validation": [n_val], "test": [n_test]}}``, higher =
        more likely hallucinated.
    """
    scorers = fit_published(records, labels, order, logit_names, toha)
    return {
        name: {"validation": score(records["validation"]), "test": score(records["test"])}
        for name, score in scorers.items()
    }
