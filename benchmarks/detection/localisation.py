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


PLAIN = {"windows": (0,), "smooths": (0,), "gaps": (0,)}
"""The issue-9 token probe: the token's own features, no smoothing, no gap merging."""


def run(datasets: dict, token_dir: Path, n_boot: int = 500, tasks=data.RAGTRUTH_TASKS) -> dict:
    """Token probes (plain, with context), log-probability: choices on validation; test pooled, per task."""
    from flashstats_hf import LOGIT_STAT_NAMES
    from halluprobe.localisation import choose_span_threshold, evaluate_spans, fit_token_probe

    if not tasks:
        raise ValueError("localisation needs at least one extracted RAGTruth task")
    split = {
        s: [(t, _token_example(ex, token_dir)) for t in tasks for ex in datasets[t].split(s).examples]
        for s in ("train", "validation", "test")
    }
    train, val = [e for _, e in split["train"]], [e for _, e in split["validation"]]
    probes = {
        "token probe (attention + logits)": fit_token_probe(train, val, **PLAIN),
        "token probe + context, smoothing, gap merging": fit_token_probe(train, val),
    }
    n_feat = train[0].features.shape[1]
    logprob = n_feat - len(LOGIT_STAT_NAMES)  # first logit statistic: answer_logprob
    methods = {n: (p.decision_function, p.threshold, p.gap) for n, p in probes.items()}
    methods["negative log-probability"] = (lambda f: -f[:, logprob], None, 0)
    out = {
        "fit": {n: {"C": p.C, "val_token_auroc": p.val_auroc, "window": p.window, "smooth": p.smooth,
                    "gap": p.gap} for n, p in probes.items()},
        "n_features": n_feat,
        "results": [],
    }  # fmt: skip
    for name, (fn, thr, gap) in methods.items():
        thr = thr if thr is not None else choose_span_threshold(val, [fn(e.features) for e in val])
        for task in ("all", *tasks):
            items = [e for t, e in split["test"] if task in ("all", t)]
            res = evaluate_spans(items, [fn(e.features) for e in items], thr, n_bootstrap=n_boot, gap=gap)
            row = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(res).items()}
            out["results"].append({"method": name, "task": task, **row})
    return out
