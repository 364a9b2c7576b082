"""Token-level localisation on RAGTruth's annotated spans (not in the paper), via `halluprobe.localisation`.

The extraction phase stored each answer's per-token features and character offsets. The token probe is
fitted on the training tokens of the RAGTruth tasks (`fit_token_probe`: C by validation token AUROC,
threshold by validation span F1); the negative log-probability of each token is the unsupervised
reference (threshold also by validation span F1). Test, pooled over the tasks and per task:
token AUROC, character span precision/recall/F1 (micro over answers) with group-bootstrap intervals.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import data
import numpy as np
from extraction import token_file


def _token_example(ex, token_dir: Path):
    from halluprobe.localisation import TokenExample, char_mask

    z = np.load(token_file(token_dir, ex.id))
    feats = np.nan_to_num(z["feats"].astype(np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    return TokenExample(feats, z["offsets"], char_mask(ex.spans, len(ex.answer)), str(ex.group))


def run(datasets: dict, token_dir: Path, n_boot: int = 500, tasks=data.RAGTRUTH_TASKS) -> dict:
    """Train the token probe, choose C and thresholds on validation, evaluate on test (pooled + per task)."""
    from flashstats_hf import LOGIT_STAT_NAMES
    from halluprobe.localisation import choose_span_threshold, evaluate_spans, fit_token_probe

    if not tasks:
        raise ValueError("localisation needs at least one extracted RAGTruth task")
    split = {
        s: [(t, _token_example(ex, token_dir)) for t in tasks for ex in datasets[t].split(s).examples]
        for s in ("train", "validation", "test")
    }
    train, val = [e for _, e in split["train"]], [e for _, e in split["validation"]]
    probe = fit_token_probe(train, val)
    n_feat = train[0].features.shape[1]
    logprob = n_feat - len(LOGIT_STAT_NAMES)  # first logit statistic: answer_logprob
    methods = {
        "token probe (attention + logits)": (probe.decision_function, probe.threshold),
        "negative log-probability": (lambda f: -f[:, logprob], None),
    }
    out = {"fit": {"C": probe.C, "val_token_auroc": probe.val_auroc}, "n_features": n_feat, "results": []}
    for name, (fn, thr) in methods.items():
        thr = thr if thr is not None else choose_span_threshold(val, [fn(e.features) for e in val])
        for task in ("all", *tasks):
            items = [e for t, e in split["test"] if task in ("all", t)]
            res = evaluate_spans(items, [fn(e.features) for e in items], thr, n_bootstrap=n_boot)
            row = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(res).items()}
            out["results"].append({"method": name, "task": task, **row})
    return out
