"""Selecting A7's and L9's features once, as the paper does (Appendix L.1), and storing the result.

The paper chose its seven A7 and nine L9 features once, by grouped five-fold cross-validation on one
training split (TRIVIA+ with Qwen3-4B), and reused them on every dataset and proxy without repeating
the selection. Here:

- `cv_auroc`: grouped ``folds``-fold cross-validated AUROC of a class-balanced L2 logistic
  regression (liblinear) on standardised features (standardiser fit inside every fold), the best mean
  fold AUROC over ``C``; ties go to the smaller ``C``.
- `select_a7`: ``K`` (induction heads) by `cv_auroc` of all 22 candidates, then forward
  selection: starting from nothing, add the candidate whose addition has the highest CV AUROC, until
  ``n_features``. Ties (equal AUROC) go to the smaller ``K`` and to the candidate listed first in
  `halluprobe.blocks.A7_CANDIDATES` (means before spreads and extremes, then the paper's order
  of statistics: the simpler representation).
- `select_l9`: for each ``C``, recursive feature elimination (one feature at a time) on the
  standardised 224 candidates down to ``n_features``; the ``C`` whose kept set has the highest CV AUROC
  wins (ties to the smaller ``C``).

A `Selection` is saved as JSON with its provenance; the packaged defaults are
``halluprobe/blocks/selections/a7.json`` and ``l9.json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from halubench_data.metrics import C_GRID
from sklearn.preprocessing import StandardScaler

from halluprobe.blocks._blocks import A7_CANDIDATES, KS, L9_CANDIDATES, A7Block, l9_matrix
from halluprobe.features._records import ExampleRecord


@dataclass
class Selection:
    """A block's selected features and how they were obtained."""

    block: str
    """``"A7"`` or ``"L9"``."""
    features: tuple[str, ...]
    """Selected feature names, in the order they were selected (A7) or candidate order (L9)."""
    provenance: dict[str, Any] = field(default_factory=dict)
    """Procedure, data, proxy, scores, date and versions."""

    def to_json(self) -> str:
        """The selection as indented JSON."""
        doc = {"block": self.block, "features": list(self.features), "provenance": self.provenance}
        return json.dumps(doc, indent=1) + "\n"

    def save(self, path: str | Path) -> Path:
        """Write the JSON atomically; returns ``path``."""
        from halluprobe.features._cache import atomic_write_bytes

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, self.to_json().encode())
        return path

    @classmethod
    def load(cls, path: str | Path, block: str | None = None) -> Selection:
        """Read a selection file; ``block`` checks which block it is for.

        Raises:
            ValueError: Not a selection file, another block, or features outside the block's candidates.
        """
        try:
            doc = json.loads(Path(path).read_text())
            sel = cls(str(doc["block"]), tuple(doc["features"]), dict(doc.get("provenance", {})))
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path} is not a selection file (expected block, features): {exc}") from exc
        if block is not None and sel.block != block:
            raise ValueError(f"{path} selects {sel.block} features, expected {block}")
        from halluprobe.blocks._blocks import HEAD_FEATURES

        allowed = HEAD_FEATURES if sel.block == "A7" else L9_CANDIDATES
        bad = [f for f in sel.features if f not in allowed]
        if bad or not sel.features:
            raise ValueError(f"{path}: features not among the {sel.block} candidates: {bad}")
        return sel


def _logreg(c: float):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(solver="liblinear", class_weight="balanced", C=c, max_iter=1000)


def _folds(y: np.ndarray, groups: Sequence[str], folds: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Grouped folds whose both parts hold both classes."""
    from sklearn.model_selection import GroupKFold

    n_groups = len(set(groups))
    if n_groups < 2:
        raise ValueError("grouped cross-validation needs at least two groups")
    splits = GroupKFold(n_splits=min(folds, n_groups)).split(np.zeros(len(y)), y, list(groups))
    out = [(tr, te) for tr, te in splits if len(set(y[te])) == 2 and len(set(y[tr])) == 2]
    if not out:
        raise ValueError("no cross-validation fold has both labels on both sides")
    return out


def cv_auroc(
    x: np.ndarray,
    y: np.ndarray,
    groups: Sequence[str],
    folds: int = 5,
    cs: Sequence[float] = C_GRID,
    splits: list[tuple[np.ndarray, np.ndarray]] | None = None,
) -> tuple[float, float]:
    """Best mean fold AUROC over ``cs`` of a balanced logistic regression, and its ``C``.

    Args:
        x: ``[n, d]`` features.
        y: ``[n]`` labels (1 = hallucinated).
        groups: ``n`` group ids; a group is never on both sides of a fold.
        folds: Number of folds (fewer when there are fewer groups).
        cs: Regularisation strengths; ties go to the smaller.
        splits: Precomputed folds (from the same ``y`` and ``groups``), to reuse across calls.
    """
    from halubench_data.metrics import auroc

    y = np.asarray(y)
    splits = splits if splits is not None else _folds(y, groups, folds)
    best = None
    for c in sorted(cs):
        scores = []
        for tr, te in splits:
            sc = StandardScaler().fit(x[tr])
            lr = _logreg(c).fit(sc.transform(x[tr]), y[tr])
            scores.append(float(auroc(lr.decision_function(sc.transform(x[te])), y[te])))
        mean = float(np.mean(scores))
        if best is None or mean > best[0] + 1e-12:
            best = (mean, float(c))
    if best is None:
        raise ValueError("cv_auroc needs at least one value of C in cs")
    return best


def forward_select(
    x: np.ndarray,
    names: Sequence[str],
    y: np.ndarray,
    groups: Sequence[str],
    n_features: int,
    folds: int = 5,
    cs: Sequence[float] = C_GRID,
) -> tuple[list[int], list[dict[str, Any]]]:
    """Greedy forward selection of ``n_features`` columns of ``x`` by `cv_auroc`.

    Ties go to the column listed first. Returns the chosen column indices (in the order chosen) and
    the path: per step the added feature, its CV AUROC and ``C``.
    """
    y = np.asarray(y)
    if not 1 <= n_features <= x.shape[1]:
        raise ValueError(f"n_features must be in 1..{x.shape[1]}, got {n_features}")
    splits = _folds(y, groups, folds)
    chosen: list[int] = []
    path: list[dict[str, Any]] = []
    while len(chosen) < n_features:
        best = None
        for j in range(x.shape[1]):
            if j in chosen:
                continue
            score, c = cv_auroc(x[:, chosen + [j]], y, groups, cs=cs, splits=splits)
            if best is None or score > best[0] + 1e-12:
                best = (score, c, j)
        if best is None:
            raise ValueError(f"asked for {n_features} features but only {x.shape[1]} candidates exist")
        score, c, j = best
        chosen.append(j)
        path.append({"feature": names[j], "cv_auroc": score, "C": c})
    return chosen, path


def a7_candidates(records: list[ExampleRecord], heads: list[int]) -> np.ndarray:
    """``[n, 22]`` the A7 candidates averaged over ``heads`` (columns follow ``A7_CANDIDATES``)."""
    return A7Block(heads, A7_CANDIDATES).transform(records)


def select_a7(
    records: list[ExampleRecord],
    y: np.ndarray,
    groups: Sequence[str],
    order: list[int],
    *,
    n_features: int = 7,
    ks: Sequence[int] = KS,
    folds: int = 5,
) -> Selection:
    """Choose ``K`` and then ``n_features`` of the 22 A7 candidates by grouped CV AUROC (module docstring).

    Args:
        records: Training records of the selection set.
        y: Their labels.
        groups: Their groups.
        order: Flat head indices ranked by induction score (strongest first).
        n_features: Number of features kept (7: A7).
        ks: Head counts searched (ties to the smaller).
        folds: Cross-validation folds.
    """
    y = np.asarray(y)
    splits = _folds(y, groups, folds)
    k_scores = {}
    for k in sorted(ks):
        if k <= len(order):
            k_scores[k] = cv_auroc(a7_candidates(records, order[:k]), y, groups, splits=splits)[0]
    if not k_scores:
        raise ValueError("select_a7 needs at least one head in the induction ranking")
    best_k = min(k for k, s in k_scores.items() if s >= max(k_scores.values()) - 1e-12)
    x = a7_candidates(records, order[:best_k])
    chosen, path = forward_select(x, A7_CANDIDATES, y, groups, n_features, folds)
    return Selection(
        "A7",
        tuple(A7_CANDIDATES[j] for j in chosen),
        {"procedure": "K by grouped CV AUROC of all 22 candidates, then forward selection by grouped CV "
         "AUROC (halluprobe.blocks.select_a7)", "K": best_k, "K_cv_auroc": k_scores, "path": path,
         "folds": folds, "cs": list(C_GRID), "n_examples": len(y), "n_groups": len(set(groups))},
    )  # fmt: skip


def select_l9(
    records: list[ExampleRecord],
    y: np.ndarray,
    groups: Sequence[str],
    *,
    n_features: int = 9,
    cs: Sequence[float] = C_GRID,
    folds: int = 5,
) -> Selection:
    """Keep ``n_features`` of the 224 logit candidates by RFE, ``C`` by grouped CV AUROC (see the module)."""
    from sklearn.feature_selection import RFE

    y = np.asarray(y)
    x = l9_matrix(records, L9_CANDIDATES)
    z = StandardScaler().fit(x).transform(x)
    splits = _folds(y, groups, folds)
    best, tried = None, {}
    for c in sorted(cs):
        keep = np.flatnonzero(RFE(_logreg(c), n_features_to_select=n_features).fit(z, y).support_)
        score = cv_auroc(x[:, keep], y, groups, cs=(c,), splits=splits)[0]
        tried[str(c)] = {"features": [L9_CANDIDATES[j] for j in keep], "cv_auroc": score}
        if best is None or score > best[0] + 1e-12:
            best = (score, c, keep)
    if best is None:
        raise ValueError("select_l9 needs at least one value of C in cs")
    score, c, keep = best
    return Selection(
        "L9",
        tuple(L9_CANDIDATES[j] for j in keep),
        {"procedure": "recursive feature elimination of the 224 standardised candidates with a balanced "
         "logistic regression, C by grouped CV AUROC of the kept set (halluprobe.blocks.select_l9)",
         "C": c, "cv_auroc": score, "per_C": tried, "folds": folds, "n_examples": len(y),
         "n_groups": len(set(groups))},
    )  # fmt: skip


def run_selection(
    block: str,
    records: list[ExampleRecord],
    y: np.ndarray,
    groups: Sequence[str],
    ext: Any,
    n_features: int,
    data: dict[str, Any],
) -> Selection:
    """Select ``block``'s features on extracted records and record the provenance (the CLI's body).

    Args:
        block: ``"A7"`` or ``"L9"``.
        records: Records of the selection split.
        y: Their labels.
        groups: Their groups.
        ext: The `halluprobe.features.ProxyExtractor` that made them (A7 ranks its induction heads).
        n_features: Features kept.
        data: Where the records come from (dataset, split, proxy, ...), stored in the provenance.
    """
    import datetime
    from importlib import metadata

    if block == "A7":
        from halluprobe.blocks._induction import induction_scores, rank_heads

        n_layers = int(ext.model.config.num_hidden_layers)
        layers = ext.layers if ext.layers is not None else tuple(range(n_layers))
        sel = select_a7(
            records, y, groups, rank_heads(induction_scores(ext.model), layers), n_features=n_features
        )
    elif block == "L9":
        sel = select_l9(records, y, groups, n_features=n_features)
    else:
        raise ValueError(f"block must be 'A7' or 'L9', got {block!r}")
    versions = {}
    for pkg in ("halluprobe", "flashstats-hf", "torch", "transformers", "scikit-learn"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = "absent"
    sel.provenance = {
        **data,
        **sel.provenance,
        "n_positive": int(np.sum(y)),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": versions,
    }
    return sel
