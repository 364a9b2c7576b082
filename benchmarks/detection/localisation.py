"""Token-level localisation on RAGTruth's annotated spans (not in the paper).

Each answer token has ``NL * 8`` head-mean attention statistics (T1/T2 of every layer) and the seven
logit statistics (written by the extraction phase). A class-balanced logistic regression is trained on
the training tokens of the three RAGTruth tasks (a token is positive when it overlaps an annotated
span), ``C`` is chosen by validation token AUROC and the threshold by validation span-overlap F1; the
test split is scored once. An unsupervised reference scores each token by its negative log-probability
(threshold also chosen on validation).

Metrics on test, pooled over the tasks and per task:
- token AUROC over all answer tokens;
- span-overlap precision/recall/F1 at the character level, micro-averaged over answers (the predicted
  characters are the union of flagged tokens' characters; LettuceDetect's span-level metric);
- 95% intervals from a bootstrap of test groups (source documents).
"""

from __future__ import annotations

from pathlib import Path

import data
import numpy as np
from extraction import token_file

CS = (0.01, 0.1, 1.0)
MAX_TRAIN_TOKENS = 200_000


def _example_tokens(ex, token_dir: Path) -> dict:
    z = np.load(token_file(token_dir, ex.id))
    feats = np.nan_to_num(z["feats"].astype(np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    off = z["offsets"]
    gold = np.zeros(len(ex.answer), dtype=bool)
    for sp in ex.spans:
        gold[sp.start : sp.end] = True
    y = np.array([gold[s:e].any() if e > s else False for s, e in off], dtype=np.int64)
    return {"feats": feats, "offsets": off, "gold": gold, "y": y, "group": str(ex.group)}


def _split_tokens(datasets, token_dir, split: str, tasks) -> list[dict]:
    out = []
    for task in tasks:
        for ex in datasets[task].split(split).examples:
            item = _example_tokens(ex, token_dir)
            item["task"] = task
            out.append(item)
    return out


def _stack(items):
    return np.concatenate([i["feats"] for i in items]), np.concatenate([i["y"] for i in items])


def _span_counts(items, scores_per_item, thr) -> np.ndarray:
    """``[n, 3]`` overlapping, predicted and gold characters of each answer."""
    rows = []
    for it, s in zip(items, scores_per_item, strict=True):
        pred = np.zeros_like(it["gold"])
        for (a, b), flag in zip(it["offsets"], s >= thr, strict=True):
            if flag and b > a:
                pred[a:b] = True
        rows.append((np.sum(pred & it["gold"]), pred.sum(), it["gold"].sum()))
    return np.asarray(rows, dtype=np.float64)


def _prf(c: np.ndarray) -> tuple[float, float, float]:
    ov, pr, go = c[..., 0], c[..., 1], c[..., 2]
    p = np.where(pr > 0, ov / np.maximum(pr, 1), 0.0)
    r = np.where(go > 0, ov / np.maximum(go, 1), 0.0)
    f = np.where(p + r > 0, 2 * p * r / np.maximum(p + r, 1e-12), 0.0)
    return p, r, f


def _choose_threshold(items, scores) -> float:
    allv = np.concatenate(scores)
    best = (-1.0, float(allv.max()))
    for thr in np.unique(np.quantile(allv, np.linspace(0.5, 0.995, 60))):
        f = float(_prf(_span_counts(items, scores, thr).sum(0))[2])
        if f > best[0] + 1e-12 or (abs(f - best[0]) <= 1e-12 and thr > best[1]):
            best = (f, float(thr))
    return best[1]


def _bootstrap(items, scores, thr, n_boot: int) -> dict:
    from sklearn.metrics import roc_auc_score

    groups = sorted({it["group"] for it in items})
    gi = np.array([groups.index(it["group"]) for it in items])
    counts = _span_counts(items, scores, thr)
    y = np.concatenate([it["y"] for it in items])
    s = np.concatenate(scores)
    tok_item = np.concatenate([np.full(len(it["y"]), k) for k, it in enumerate(items)])
    rng = np.random.default_rng(42)
    aucs, f1s = [], []
    for _ in range(n_boot):
        w_g = np.bincount(rng.integers(0, len(groups), len(groups)), minlength=len(groups))
        w_item = w_g[gi].astype(np.float64)
        f1s.append(float(_prf(w_item @ counts)[2]))
        w_tok = w_item[tok_item]
        keep = w_tok > 0
        if len(set(y[keep])) == 2:
            aucs.append(roc_auc_score(y[keep], s[keep], sample_weight=w_tok[keep]))
    p, r, f = _prf(counts.sum(0))
    tok_f1 = _token_f1(y, s >= thr)
    return {
        "token_auroc": float(roc_auc_score(y, s)) if len(set(y)) == 2 else float("nan"),
        "token_auroc_ci": [float(v) for v in np.quantile(aucs, [0.025, 0.975])] if aucs else [np.nan, np.nan],
        "span_precision": float(p),
        "span_recall": float(r),
        "span_f1": float(f),
        "span_f1_ci": [float(v) for v in np.quantile(f1s, [0.025, 0.975])],
        "token_f1": tok_f1,
        "threshold": float(thr),
        "n_answers": len(items),
        "n_tokens": int(len(y)),
        "n_positive_tokens": int(y.sum()),
        "n_groups": len(groups),
    }


def _token_f1(y, pred) -> float:
    tp, fp, fn = np.sum(pred & (y == 1)), np.sum(pred & (y == 0)), np.sum(~pred & (y == 1))
    return float(2 * tp / max(2 * tp + fp + fn, 1))


def _fit(tr, va):
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    x, y = _stack(tr)
    if len(y) > MAX_TRAIN_TOKENS:
        keep = np.random.default_rng(42).choice(len(y), MAX_TRAIN_TOKENS, replace=False)
        x, y = x[keep], y[keep]
    mu, sd = x.mean(0), x.std(0)
    sd = np.where(sd > 1e-8, sd, 1.0)
    xv, yv = _stack(va)
    best = None
    for c in CS:
        lr = LogisticRegression(C=c, class_weight="balanced", max_iter=500).fit((x - mu) / sd, y)
        a = roc_auc_score(yv, lr.decision_function((xv - mu) / sd)) if len(set(yv)) == 2 else 0.5
        if best is None or a > best[0] + 1e-12:
            best = (a, c, lr)
    a, c, lr = best
    return (lambda f: lr.decision_function((f - mu) / sd)), {"C": c, "val_token_auroc": float(a)}


def run(datasets: dict, token_dir: Path, n_boot: int = 500, tasks=data.RAGTRUTH_TASKS) -> dict:
    """Train the token scorer, choose C and threshold on validation, evaluate on test (pooled + per task)."""
    if not tasks:
        raise ValueError("localisation needs at least one extracted RAGTruth task")
    tr, va, te = (_split_tokens(datasets, token_dir, s, tasks) for s in ("train", "validation", "test"))
    scorer, info = _fit(tr, va)
    n_feat = tr[0]["feats"].shape[1]
    from flashstats_hf import LOGIT_STAT_NAMES

    logprob = n_feat - len(LOGIT_STAT_NAMES)  # first logit statistic: answer_logprob
    methods = {
        "token probe (attention + logits)": scorer,
        "negative log-probability": lambda f: -f[:, logprob],
    }
    out = {"fit": info, "n_features": n_feat, "results": []}
    for name, fn in methods.items():
        thr = _choose_threshold(va, [fn(it["feats"]) for it in va])
        for task in ("all", *tasks):
            items = [it for it in te if task in ("all", it["task"])]
            res = _bootstrap(items, [fn(it["feats"]) for it in items], thr, n_boot)
            out["results"].append({"method": name, "task": task, **res})
    return out
