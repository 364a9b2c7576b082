"""A general detector: one probe trained on several sources, chosen for sources it never saw.

The recipe (`fit_general_probe`; ``halluprobe train --general`` runs it, and `halluprobe.fit_general` makes a
`Detector` of it):

1. **Equal weight per source.** Every training answer gets a sample weight so that each source weighs
   the same in total and, within a source, both labels weigh the same (`source_label_weights`). A large
   source does not drown a small one, and no source's base rate leaks into the fit.
2. **Feature set by leave-one-source-out.** For every candidate feature set (default
   `GENERAL_FEATURE_SETS`) and every source in turn, the probe is fitted on the other sources (A7's
   head count ``K`` and A64's sink count ``k`` chosen as in `halluprobe.training._protocol`, on those sources
   only; ``C`` by the mean per-source validation AUROC of those sources) and scored on the held-out
   source's training and validation answers. The candidate with the highest mean held-out AUROC wins
   (ties to the earlier candidate). No source ever takes part in the fit it is scored by, and no test
   split is read.
3. **Final fit** of the chosen set on the training splits of every source (weighted as in 1).
4. **Calibration** on the pooled validation splits: a Platt scaling (a weighted one-feature logistic
   regression of the label on the probe's logit, each source weighing the same;
   `halluprobe.training.Calibrator`) folded into the probe's weights, so its probabilities are the
   calibrated ones.
5. **Threshold** maximising the mean per-source validation F1 of the calibrated probabilities (ties
   to the higher threshold; `halluprobe.training._calibration.transfer_threshold`): the threshold that works
   across sources rather than on the pooled set.

Everything is deterministic: the same records give the same detector, byte for byte, once saved.
Scores: higher means more likely hallucinated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from halubench_data.metrics import auroc, best_by_validation
from sklearn.preprocessing import StandardScaler

from halluprobe.blocks._blocks import A7_SELECTION, L9_SELECTION, parse_feature_set
from halluprobe.features._records import ExampleRecord
from halluprobe.training._anchor import ANCHOR_WEIGHTS, anchor, anchored_scores, parse_candidate
from halluprobe.training._protocol import CS, ProbeFit, make_blocks, select_heads, select_sink_count

GENERAL_FEATURE_SETS: tuple[str, ...] = (
    "O+CA7H64", "O+CH64", "O+C", "O+A7H64", "O+H64", "O+A7", "GCA7H64", "GA7L9", "GH64", "GA7H64", "GA64H64",
    "GA7H64L9", "GA64H64L9",
)  # fmt: skip
"""Candidate feature sets of a general detector, in tie-break order: anchored ones (``O+``, see the
module docstring), with the context contrast block C first, and probes with the grounding block G."""

SPLITS = ("train", "validation")
"""The splits a general detector reads from each source (the test splits stay untouched)."""


@dataclass
class _Pool:
    """Records of several sources, concatenated, with each record's label, group and source index."""

    records: list[ExampleRecord]
    y: np.ndarray
    groups: list[str]
    source: np.ndarray

    def take(self, mask: np.ndarray) -> _Pool:
        idx = np.flatnonzero(mask)
        return _Pool(
            [self.records[i] for i in idx], self.y[idx], [self.groups[i] for i in idx], self.source[idx]
        )


@dataclass
class GeneralProbe:
    """What `fit_general_probe` chose and fitted."""

    probe: ProbeFit
    """The general probe (calibrated, with the transfer threshold)."""
    feature_set: str
    """The chosen feature set."""
    loso_auroc: dict[str, dict[str, float]]
    """``{candidate: {held-out source: AUROC}}`` of every candidate (NaN where a source has one label)."""
    sources: list[str] = field(default_factory=list)
    """The training sources, in the order given."""
    calibration: tuple[float, float] = (1.0, 0.0)
    """``(slope, intercept)`` of the Platt scaling folded into the probe."""
    candidate: str = ""
    """The chosen candidate as named in `loso_auroc` (``"O+A7H64@0.3"`` for an anchored one)."""

    def mean_loso_auroc(self) -> dict[str, float]:
        """``{feature set: mean held-out AUROC}`` over the sources with both labels."""
        return {fs: _nanmean(list(per.values())) for fs, per in self.loso_auroc.items()}


def _nanmean(values: Sequence[float]) -> float:
    vals = [v for v in values if np.isfinite(v)]
    return float(np.mean(vals)) if vals else float("nan")


def source_label_weights(y: np.ndarray, source: np.ndarray) -> np.ndarray:
    """``[n] float64`` sample weights: every source the same total, both labels the same within a source.

    Weight of an answer of source ``s`` with label ``c``: ``n / (S * L_s * n_{s,c})`` (``S`` sources,
    ``L_s`` labels present in ``s``), so the weights sum to ``n``.
    """
    y, source = np.asarray(y), np.asarray(source)
    w = np.zeros(len(y), dtype=np.float64)
    sources = np.unique(source)
    for s in sources:
        in_s = source == s
        labels = np.unique(y[in_s])
        for c in labels:
            m = in_s & (y == c)
            w[m] = len(y) / (len(sources) * len(labels) * m.sum())
    return w


def mean_source_auroc(scores: np.ndarray, y: np.ndarray, source: np.ndarray) -> float:
    """The mean over sources (those with both labels) of the AUROC within each source; NaN if none."""
    out = []
    for s in np.unique(source):
        m = source == s
        if len(np.unique(y[m])) == 2:
            out.append(auroc(scores[m], y[m]))
    return _nanmean(out)


def _logreg(c: float, seed: int):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(solver="liblinear", C=c, max_iter=1000, random_state=seed)


def _hyper(
    name_sets: Sequence[str], order: Sequence[int], tr: _Pool, va: _Pool, a7_features
) -> tuple[list[int], int]:
    """A7's heads and A64's ``k`` for the feature sets, chosen on ``tr`` / ``va`` (`halluprobe.training`)."""
    used = {b for s in name_sets for b in parse_feature_set(s)}
    heads, k = list(order[:1]), 1
    if "A7" in used:
        best, _ = select_heads(list(order), tr.records, tr.y, va.records, va.y, features=a7_features)
        heads = list(order[:best])
    if "A64" in used:
        k, _ = select_sink_count(
            tr.records, tr.y, [f"{s}/{g}" for s, g in zip(tr.source, tr.groups, strict=True)]
        )
    return heads, k


def fit_weighted(
    feature_set: str, heads: list[int], k: int, tr: _Pool, va: _Pool, *, seed: int = 0,
    a7_features: tuple[str, ...] = A7_SELECTION, l9_features: tuple[str, ...] = L9_SELECTION,
    cs: Sequence[float] = CS,
) -> ProbeFit:  # fmt: skip
    """Blocks fitted on ``tr``; logistic weights with `source_weights`; ``C`` by mean per-source val AUROC.

    The threshold is left at 0.5 (`fit_general` calibrates and sets it).
    """
    blocks = make_blocks(feature_set, heads, k, a7_features=a7_features, l9_features=l9_features)
    for b in blocks:
        b.fit(tr.records, tr.y)
    x_tr = np.hstack([b.transform(tr.records) for b in blocks])
    scaler = StandardScaler().fit(x_tr)
    z_tr = scaler.transform(x_tr)
    z_va = scaler.transform(np.hstack([b.transform(va.records) for b in blocks]))
    w = source_label_weights(tr.y, tr.source)

    def fit(c: float):
        lr = _logreg(c, seed).fit(z_tr, tr.y, sample_weight=w)
        return mean_source_auroc(lr.decision_function(z_va), va.y, va.source), lr

    c, score, lr = best_by_validation(sorted(cs), fit)
    return ProbeFit(feature_set, blocks, scaler, lr.coef_[0].astype(np.float64), float(lr.intercept_[0]),
                    float(c), 0.5, float(score))  # fmt: skip


GENERAL_THRESHOLD_RULE = "false-alarm@0.2"
"""How a general detector's threshold is chosen on the validation splits by default: the lowest
threshold that flags at most 20 % of each source's supported answers, on average, so that a detector
called one answer at a time does not call most supported answers hallucinated (the best mean F1 over
the sources, ``mean-f1``, does that on sources with few hallucinations; `halluprobe.training._thresholds`
has the rules)."""


def calibrate(fit: ProbeFit, va: _Pool, threshold_rule: str = GENERAL_THRESHOLD_RULE) -> tuple[float, float]:
    """Platt-scale ``fit`` on ``va`` and fold it in, then set the transfer threshold; returns ``(a, b)``.

    The calibration and the threshold are `halluprobe.training._calibration`'s: a `Calibrator` fitted on the
    probe's validation logits with every source weighing the same, and `transfer_threshold` under
    ``threshold_rule`` (default `GENERAL_THRESHOLD_RULE`). After the call ``fit.predict_proba`` gives
    ``sigmoid(a * logit + b)`` of the old logit.
    """
    from halluprobe.training._calibration import (
        Calibrator,
        check_collapse,
        source_weights as equal_source_weights,
        transfer_threshold,
    )

    cal = Calibrator("platt").fit(
        fit.decision_function(va.records),
        va.y,
        sample_weight=equal_source_weights([str(s) for s in va.source]),
    )
    fit.coef = fit.coef * cal.a_
    fit.intercept = fit.intercept * cal.a_ + cal.b_
    p = fit.predict_proba(va.records)[:, 1]
    by = {s: np.flatnonzero(va.source == s) for s in np.unique(va.source)}
    fit.threshold = transfer_threshold(
        {str(s): p[i] for s, i in by.items()}, {str(s): va.y[i] for s, i in by.items()}, threshold_rule
    )
    check_collapse(p, fit.threshold, what="general detector")
    return cal.a_, cal.b_


def source_names(datasets: Sequence[Any]) -> list[str]:
    """The sources of ``datasets``: their examples' distinct ``source`` values, in order of appearance."""
    return list(
        dict.fromkeys(ex.source for ds in datasets for split in SPLITS for ex in ds.split(split).examples)
    )


def _pool(
    datasets: Sequence[Any],
    records: Mapping[str, Mapping[str, Sequence[ExampleRecord]]],
    split: str,
    names: Sequence[str],
) -> _Pool:
    """The split of every dataset, concatenated; sources index ``names``, groups are per dataset."""
    recs: list[ExampleRecord] = []
    ys, groups, source = [], [], []
    for i, ds in enumerate(datasets):
        if ds.name not in records:
            raise ValueError(f"no records for dataset {ds.name!r}")
        part = ds.split(split)
        got = list(records[ds.name][split])
        if [r.id for r in got] != [ex.id for ex in part.examples]:
            raise ValueError(
                f"records of {ds.name!r} {split} do not match its examples (one record per example, in order)"
            )
        recs += got
        ys.append(np.asarray(part.labels, dtype=np.int64))
        groups += [f"{i}/{ex.group}" for ex in part.examples]
        source += [names.index(ex.source) for ex in part.examples]
    return _Pool(recs, np.concatenate(ys), groups, np.asarray(source, dtype=np.int64))


def _check_sources(names: Sequence[str], tr: _Pool, va: _Pool) -> None:
    """At least two sources, both labels in each one's splits (else `ValueError`); few of a label warn."""
    from halluprobe.training._calibration import check_labels

    if len(names) < 2:
        raise ValueError(f"a general detector needs at least two sources (Example.source), got {list(names)}")
    for i, name in enumerate(names):
        for split, pool in (("train", tr), ("validation", va)):
            if len(np.unique(pool.y[pool.source == i])) < 2:
                raise ValueError(f"source {name!r}: its {split} split needs both labels (0 and 1)")
        check_labels(tr.y[tr.source == i], va.y[va.source == i], what=f"general detector, source {name!r}")


def _held_out(i: int, tr: _Pool, va: _Pool) -> tuple[_Pool, _Pool, list[ExampleRecord], np.ndarray]:
    """The pools without source ``i`` (and any group it holds), and source ``i``'s records and labels."""
    held_groups = {g for pool in (tr, va) for g, s in zip(pool.groups, pool.source, strict=True) if s == i}
    keep = [(pool.source != i) & ~np.isin(pool.groups, list(held_groups)) for pool in (tr, va)]
    held = np.concatenate([tr.source == i, va.source == i])
    held_records = [r for r, m in zip(tr.records + va.records, held, strict=True) if m]
    return tr.take(keep[0]), va.take(keep[1]), held_records, np.concatenate([tr.y, va.y])[held]


def loso_auroc(
    names: Sequence[str], tr: _Pool, va: _Pool, feature_sets: Sequence[str], order: Sequence[int], *,
    seed: int = 0, a7_features=A7_SELECTION, l9_features=L9_SELECTION,
    note: Callable[[str], None] | None = None, jobs: int = 1,
) -> dict[str, dict[str, float]]:  # fmt: skip
    """``{candidate: {held-out source: AUROC}}``: each source scored by candidates fitted on the others.

    A plain candidate is a feature set; an anchored one (``O+<set>``) gives one entry per mix weight,
    ``O+<set>@<w>`` (`ANCHOR_WEIGHTS`). The fit of a held-out source sees neither its answers nor any
    other answer of a group it holds (a document shared between sources of one dataset); it is scored
    on its training and validation answers. ``jobs`` held-out sources are fitted at once in forked
    worker processes (`halluprobe._fork.fork_map`); the table does not depend on it.
    """
    from halluprobe._fork import fork_map

    parsed = {c: parse_candidate(c) for c in feature_sets}
    probes = list(dict.fromkeys(fs for fs, _ in parsed.values()))

    def fold(i: int) -> dict[str, float]:
        tr_i, va_i, held_records, held_y = _held_out(i, tr, va)
        heads, k = _hyper(probes, order, tr_i, va_i, a7_features)
        fits = {  # one probe per feature set, shared by its plain and anchored candidates
            fs: fit_weighted(
                fs, heads, k, tr_i, va_i, seed=seed, a7_features=a7_features, l9_features=l9_features
            )
            for fs in probes
        }
        got: dict[str, float] = {}
        for cand, (fs, anchored) in parsed.items():
            fit = fits[fs]
            if not anchored:
                got[cand] = auroc(fit.decision_function(held_records), held_y)
                continue
            for w, score in anchored_scores(fit, tr_i.records, held_records, ANCHOR_WEIGHTS).items():
                got[f"{cand}@{w:g}"] = auroc(score, held_y)
        return got

    say = note or (lambda msg: None)
    say(f"leave-one-source-out: {len(names)} held-out sources, {len(parsed)} candidates")
    out: dict[str, dict[str, float]] = {}
    for name, got in zip(names, fork_map(fold, len(names), jobs), strict=True):
        say(f"leave-one-source-out: held out {name}")
        for cand, value in got.items():
            out.setdefault(cand, {})[name] = value
    return out


def fit_general_probe(
    datasets: Sequence[Any],
    records_by_dataset: Mapping[str, Mapping[str, Sequence[ExampleRecord]]],
    *,
    head_order: Sequence[int],
    feature_sets: Sequence[str] = GENERAL_FEATURE_SETS,
    seed: int = 0,
    a7_features: tuple[str, ...] = A7_SELECTION,
    l9_features: tuple[str, ...] = L9_SELECTION,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
    threshold_rule: str = GENERAL_THRESHOLD_RULE,
) -> GeneralProbe:
    """Fit a general probe on several sources (the recipe in this module's docstring).

    Args:
        datasets: Datasets (``halubench_data.Dataset``) with distinct names. Their examples'
            ``source`` values are the sources (a RAGTruth dataset of three tasks is three sources):
            at least two, each with both labels in its train and validation answers.
        records_by_dataset: ``{dataset name: {"train": records, "validation": records}}``, one record per
            example of the split, in order, each with its grounding features when a set uses ``G``
            (`halluprobe.features._grounding.fill_grounding`).
        head_order: Flat head indices ranked by induction score (`halluprobe.rank_heads`).
        feature_sets: Candidate feature sets, in tie-break order.
        seed: Seed of the logistic regressions (the result does not depend on it beyond ties).
        a7_features: A7's features (default the packaged selection).
        l9_features: L9's features (default the packaged selection).
        progress: Told about each step (``message -> None``).
        jobs: Held-out sources fitted at once (forked worker processes); the detector is the same.
        threshold_rule: How the threshold is chosen on the validation splits (default
            `GENERAL_THRESHOLD_RULE`; `halluprobe.training._thresholds.THRESHOLD_RULES`). A
            ``false-alarm@R`` rule is kept in the selection as ``threshold_false_alarm_rate``.

    Raises:
        ValueError: fewer than two sources, duplicate names, a split with one label, records that do
            not match their examples, an unknown feature set or threshold rule.
    """
    from halluprobe.training._thresholds import check_threshold_rule, rule_selection

    check_threshold_rule(threshold_rule)
    note = progress or (lambda msg: None)
    sets = list(dict.fromkeys(feature_sets))
    for fs in sets:
        parse_candidate(fs)
    if len({ds.name for ds in datasets}) != len(datasets):
        raise ValueError(f"datasets need distinct names, got {[ds.name for ds in datasets]}")
    names = source_names(datasets)
    tr = _pool(datasets, records_by_dataset, "train", names)
    va = _pool(datasets, records_by_dataset, "validation", names)
    _check_sources(names, tr, va)
    kw: dict[str, Any] = {"seed": seed, "a7_features": a7_features, "l9_features": l9_features}
    table = loso_auroc(names, tr, va, sets, head_order, note=note, jobs=jobs, **kw)
    means = {fs: _nanmean(list(per.values())) for fs, per in table.items()}
    keys = list(table)
    chosen = max(keys, key=lambda c: (np.nan_to_num(means[c], nan=-1.0), -keys.index(c)))
    note(f"chosen {chosen} (mean held-out AUROC {means[chosen]:.4f}); fitting it on every source")
    cand, _, weight = chosen.partition("@")
    fs, anchored = parse_candidate(cand)
    heads, k = _hyper([fs], head_order, tr, va, a7_features)
    fit = fit_weighted(fs, heads, k, tr, va, **kw)
    if anchored:
        fit = anchor(fit, tr.records, tr.y, float(weight))
    a, b = calibrate(fit, va, threshold_rule)
    used = parse_feature_set(fs)
    selection = {
        **fit.selection,
        **({"K": float(len(heads))} if "A7" in used else {}),
        **({"k": float(k)} if "A64" in used else {}),
        "loso_auroc": float(means[chosen]),
        "calibration_slope": a,
        "calibration_intercept": b,
    }
    fit.selection = rule_selection(selection, threshold_rule)
    return GeneralProbe(fit, fit.feature_set, table, names, (a, b), chosen)
