"""The reader in leave-one-source-out transfer: one fine-tuning per held-out source, then two table rows.

`fold_scores` fine-tunes a reader for every held-out source on the other sources' training splits
(early-stopped on their validation splits, exactly as [`Reader.fit`][halluprobe.Reader.fit]
does) and keeps its raw score, the pooled token logit, on the examples the table reads: the others'
validation splits (calibration, threshold, anchor weight) and the held-out source. `reader_fitter`
turns those scores into the rows ``reader`` (the reader alone) and ``O+reader`` (mixed with the
zero-fit overlap score, the weight chosen on validation) of
[`leave_one_source_out`][halluprobe.evaluation.leave_one_source_out]. The scores are plain JSON, so
a table can be rebuilt on a CPU from the scores of a GPU run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from halluprobe.reader._settings import ReaderSettings

__all__ = [
    "fold_scores", "held_out_aurocs", "missing_folds", "read_fold_scores", "reader_fitter",
    "write_fold_scores",
]  # fmt: skip

READER_ROWS = ("reader", "O+reader")
"""Method names of the reader's rows in a transfer table."""


def fold_scores(
    examples: Sequence[Any],
    settings: ReaderSettings,
    *,
    proxy: str | None = None,
    device: str | None = None,
    held_out: str = "all",
    progress: Callable[[str], None] | None = None,
    on_fold: Callable[[dict[str, dict[str, Any]]], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """``{held-out source: {"scores": {example id: raw score}, "pool", "val_auroc", "steps", ...}}``.

    Args:
        examples: `halubench_data.Example` of every source, with splits (the folds of
            `halluprobe.evaluation.leave_one_source_out`; shared groups stay out of a fit).
        settings: The `halluprobe.reader.ReaderSettings` of every fine-tuning.
        proxy: Proxy id (None: the default SmolLM2).
        device: Torch device (None: CUDA when available).
        held_out: ``"all"`` or ``"test"``: which examples of the held-out source are scored.
        progress: Optional ``(message) -> None`` told about each fold.
        on_fold: Optional ``(folds so far) -> None`` called after each fold (to keep partial results).

    Raises:
        ValueError: an example longer than the proxy's positions (naming it), or a fold whose training
            or validation split lacks a label.
    """
    import torch
    from flashstats_hf import load_model

    from halluprobe.evaluation._folds import held_out_folds
    from halluprobe.reader._data import encode_row
    from halluprobe.reader._train import fit_reader, pooled, score_with_adapter

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model, tok = load_model(proxy, device=device)
    limit = getattr(model.config, "max_position_embeddings", None)
    rows = {
        e.id: encode_row(tok, e, max_positions=limit if isinstance(limit, int) else None) for e in examples
    }
    out: dict[str, dict[str, Any]] = {}
    for name, train, val, target in held_out_folds(list(examples), held_out):  # type: ignore[arg-type]
        fit = fit_reader(model, [rows[e.id] for e in train], [rows[e.id] for e in val], settings)
        scored = list({e.id: e for e in [*val, *target]}.values())
        z = score_with_adapter(model, settings.adapter, fit.adapter, fit.head, [rows[e.id] for e in scored],
                               settings.max_batch_tokens)  # fmt: skip
        raw = pooled(z, fit.pool)
        out[name] = {
            "scores": {e.id: float(s) for e, s in zip(scored, raw, strict=True)},
            "pool": fit.pool, "val_auroc": fit.val_auroc, "steps": fit.steps, "best_step": fit.best_step,
            "tokens": fit.tokens, "seconds": fit.seconds, "tokens_per_second": fit.tokens_per_second,
            "n_train": len(train), "n_validation": len(val),
        }  # fmt: skip
        if progress is not None:
            progress(
                f"reader held out {name}: {fit.steps} steps, {fit.tokens_per_second:.0f} tokens/s, "
                f"validation AUROC {fit.val_auroc:.3f} ({fit.pool})"
            )
        if on_fold is not None:
            on_fold(out)
    return out


def write_fold_scores(path: Path, scores: Mapping[str, Any], meta: Mapping[str, Any]) -> Path:
    """Write the fold scores and the run's settings as JSON (atomically)."""
    from halubench_data.files import atomic_write_text

    return atomic_write_text(
        path, json.dumps({"meta": dict(meta), "folds": dict(scores)}, indent=1), overwrite=True
    )


def read_fold_scores(path: Path) -> dict[str, dict[str, Any]]:
    """The folds of a file `write_fold_scores` wrote (ValueError naming the file when it is not one)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        folds = doc["folds"]
        if not isinstance(folds, dict) or not all(isinstance(f.get("scores"), dict) for f in folds.values()):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"{path}: not a reader fold-scores file (JSON with folds of scores)") from None
    return folds


def reader_fitter(folds: Mapping[str, Mapping[str, Any]]):
    """A transfer fitter (`halluprobe.evaluation.Fitter`) of the rows ``reader`` and ``O+reader``.

    Each fold reads the scores of its held-out source's reader: the one source absent from both the
    fold's training and validation pools. A held-out source the scores have no fold for (a run cut
    short) gets no reader rows: the table shows its cells as missing and counts the rows' means over
    the sources they have (`missing_folds` names such sources beforehand).
    """
    from halubench_data.grounding import overlap_score

    from halluprobe.reader._scoring import choose_anchor

    def fit(train, validation):
        seen = set(train.sources) | set(validation.sources)
        held = [s for s in folds if s not in seen]
        if not held:
            return {}  # no reader was fitted for this held-out source
        if len(held) != 1:
            raise ValueError(
                f"reader scores: expected one held-out source among {sorted(folds)}, found {held}"
            )
        scores = folds[held[0]]["scores"]

        def column(pool) -> np.ndarray:
            missing = [e.id for e in pool.examples if e.id not in scores]
            if missing:
                raise ValueError(f"reader scores of fold {held[0]!r} have no score for {missing[0]!r}")
            return np.array([scores[e.id] for e in pool.examples], dtype=np.float64)

        def overlap(pool) -> np.ndarray:
            return np.array([overlap_score(e.context, e.question, e.answer) for e in pool.examples])

        anchor = choose_anchor(
            column(validation), overlap(validation), validation.labels, np.asarray(validation.sources)
        )
        return {
            READER_ROWS[0]: ("reader", column),
            READER_ROWS[1]: ("reader", lambda pool: anchor(column(pool), overlap(pool))),
        }

    return fit


def missing_folds(folds: Mapping[str, Any], sources: Sequence[str]) -> list[str]:
    """The ``sources`` that ``folds`` has no fold for, in order (ValueError for a fold of no source).

    Raises:
        ValueError: a fold names a source that is not among ``sources`` (scores of other datasets).
    """
    unknown = sorted(set(folds) - set(sources))
    if unknown:
        raise ValueError(
            f"reader scores have folds for sources not in the datasets: {unknown} (datasets: {list(sources)})"
        )
    return [s for s in sources if s not in folds]


def held_out_aurocs(
    examples: Sequence[Any], folds: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, float]]:
    """``{"reader": {source: AUROC, ..., "mean": m}, "O+reader": {...}}`` of every held-out source.

    The AUROC of the raw scores, which the calibration (monotone) leaves unchanged; ``O+reader``'s weight
    is chosen on the fold's validation answers, as `reader_fitter` chooses it. A quick reading of the
    table that ``halluprobe transfer --reader-scores`` writes in full.
    """
    from halubench_data.grounding import overlap_score
    from sklearn.metrics import roc_auc_score

    from halluprobe.reader._scoring import choose_anchor

    by_id = {e.id: e for e in examples}
    out: dict[str, dict[str, float]] = {"reader": {}, "O+reader": {}}
    for source, fold in folds.items():
        scored = [by_id[i] for i in fold["scores"]]
        s = np.array([fold["scores"][e.id] for e in scored])
        o = np.array([overlap_score(e.context, e.question, e.answer) for e in scored])
        y = np.array([e.label for e in scored])
        val = np.array([e.source != source for e in scored])
        tgt = ~val
        anchor = choose_anchor(s[val], o[val], y[val], np.array([e.source for e in scored])[val])
        if len(set(y[tgt].tolist())) == 2:
            out["reader"][source] = float(roc_auc_score(y[tgt], s[tgt]))
            out["O+reader"][source] = float(roc_auc_score(y[tgt], anchor(s[tgt], o[tgt])))
    for row in out.values():
        row["mean"] = float(np.mean(list(row.values()))) if row else float("nan")
    return out
