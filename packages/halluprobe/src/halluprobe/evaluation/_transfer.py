"""Leave-one-source-out transfer (paper Appendix M): how a detector does on a source it never saw.

Sources are the distinct `halubench_data.Example.source` values of the datasets given (a RAGTruth
dataset of three tasks is three sources). For each held-out source:

* **fit** on the pooled *training* splits of every other source, each source weighted equally
  (`halluprobe.training._calibration.source_weights`), so a large source does not dominate;
* **validation** is the pooled validation splits of the other sources: it chooses ``C`` (and A7's
  ``K``), fits the calibration (Platt by default, sources weighted equally) and the threshold
  (`halluprobe.training._calibration.transfer_threshold`: the best mean F1 over the validation sources);
* **score** every example of the held-out source (``held_out="all"``, the default: none of it was
  seen, and more examples give tighter intervals) or only its test split (``held_out="test"``,
  comparable with in-source test tables).

Examples of other sources that share a group with the held-out source never enter its fit.

Every method is scored by its calibrated probability: AUROC with a group-bootstrap interval, F1 at
the transferred threshold, the best F1 any threshold reaches on the held-out source (an oracle, for
reference), ECE (10 equal-mass bins) and Δ floor, the AUROC minus the best grounding floor's on the
same source (`halubench_data.floors`). Scores: higher means more likely hallucinated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

import numpy as np
from halubench_data.dataset import Dataset
from halubench_data.floors import FLOORS, GroundingFloor, grounding_matrix
from halubench_data.grounding import GROUNDING_FEATURES
from halubench_data.metrics import evaluate, f1_at, select_threshold
from halubench_data.schema import Example

from halluprobe._fork import fork_map
from halluprobe.evaluation._folds import check_sources, held_out_folds
from halluprobe.training._calibration import (
    CalibrationMethod,
    Calibrator,
    ThresholdRule,
    reliability_curve,
    source_weights,
    transfer_threshold,
)
from halluprobe.training._thresholds import batch_threshold

if TYPE_CHECKING:
    from halluprobe.evaluation._transfer_table import TransferTable
    from halluprobe.features._records import ExampleRecord

__all__ = [
    "Fitter",
    "Pool",
    "anchored_fitter",
    "floor_fitter",
    "judge_fitter",
    "leave_one_source_out",
    "probe_fitter",
    "published_fitter",
]

Kind = Literal["probe", "detector", "judge", "text-only", "floor", "reader"]
Scorer = Callable[["Pool"], np.ndarray]
"""A fitted method: a pool of examples -> ``[n]`` raw scores, higher = more likely hallucinated."""
Fitter = Callable[["Pool", "Pool"], dict[str, tuple[Kind, Scorer]]]
"""``(train, validation) -> {method name: (kind, scorer)}``: fits one or several methods."""


@dataclass(frozen=True)
class Pool:
    """Examples of one or several sources, with their records when a proxy read them."""

    examples: tuple[Example, ...]
    """The examples, in a fixed order."""
    records: tuple[ExampleRecord, ...] | None
    """Their records, in the same order (``None``: text-only methods only)."""

    @property
    def labels(self) -> np.ndarray:
        """``[n] int64`` labels (1 = hallucinated)."""
        return np.array([e.label for e in self.examples], dtype=np.int64)

    @property
    def sources(self) -> list[str]:
        """``[n]`` source of each example."""
        return [e.source for e in self.examples]

    @property
    def groups(self) -> list[str]:
        """``[n]`` group of each example (the bootstrap unit)."""
        return [str(e.group) for e in self.examples]

    @property
    def weights(self) -> np.ndarray:
        """``[n] float64`` weights that give every source the same total (mean 1)."""
        return source_weights(self.sources)

    def record_list(self) -> list[ExampleRecord]:
        """The records as a list; raises ValueError when the pool has none."""
        if self.records is None:
            raise ValueError("this method needs proxy records; pass records= to leave_one_source_out")
        return list(self.records)


def _pool(examples: Sequence[Example], records: Mapping[str, ExampleRecord] | None) -> Pool:
    if records is None:
        return Pool(tuple(examples), None)
    missing = [e.id for e in examples if e.id not in records]
    if missing:
        raise ValueError(f"records: no record for example {missing[0]!r} ({len(missing)} missing)")
    return Pool(tuple(examples), tuple(records[e.id] for e in examples))


@lru_cache(maxsize=1 << 16)
def _grounding_row(context: str, question: str, answer: str) -> np.ndarray:
    """Grounding features of one answer, cached: every fold of a run reads the same examples again."""
    return grounding_matrix([Example("", "", context, question, answer, 0, "")])[0]


def _grounding(pool: Pool) -> np.ndarray:
    return np.stack([_grounding_row(e.context, e.question, e.answer) for e in pool.examples])


def floor_fitter(train: Pool, validation: Pool) -> dict[str, tuple[Kind, Scorer]]:
    """The two grounding floors: zero-fit overlap, and the grounding regression fitted on ``train``."""
    fit = GroundingFloor().fit(
        _grounding(train),
        train.labels,
        _grounding(validation),
        validation.labels,
        sample_weight=train.weights,
    )
    overlap = GROUNDING_FEATURES.index("unsupported_word_share")  # = overlap_score
    return {
        FLOORS[0]: ("floor", lambda pool: _grounding(pool)[:, overlap]),
        FLOORS[1]: ("floor", lambda pool: fit.decision_function(_grounding(pool))),
    }


def probe_fitter(feature_sets: Sequence[str], head_order: Sequence[int], **selections) -> Fitter:
    """Feature-set probes fitted by `halluprobe.training.train_feature_sets` (sources weighted equally).

    ``selections`` (``a7_features``, ``l9_features``) replace the packaged A7/L9 selections. Scores are
    the probes' decision functions.
    """
    from halluprobe.training._protocol import train_feature_sets

    def fit(train: Pool, validation: Pool) -> dict[str, tuple[Kind, Scorer]]:
        fits = train_feature_sets(
            list(feature_sets), list(head_order), train.record_list(), train.labels, train.groups,
            validation.record_list(), validation.labels, sample_weight=train.weights, **selections,
        )  # fmt: skip

        def scorer(f) -> Scorer:
            return lambda pool: f.decision_function(pool.record_list())

        return {name: ("probe", scorer(f)) for name, f in fits.items()}

    return fit


def anchored_fitter(candidates: Sequence[str], head_order: Sequence[int]) -> Fitter:
    """Anchored candidates of the general detector: the overlap floor mixed with a probe.

    Each candidate is ``O+SET@w`` (the mix weight ``w`` given; the packaged detector is
    ``O+A7H64@0.4``) or ``O+SET`` (``w`` chosen in every fold among
    `halluprobe.training._anchor.ANCHOR_WEIGHTS` by the mean per-source AUROC on the validation pool);
    the probe of ``SET`` is fitted as `halluprobe.fit_general` fits it (sources and labels
    weighted equally, A7's heads chosen on the fit's own sources). Scores: the mixed logit.
    """
    from halluprobe.blocks._blocks import A7_SELECTION
    from halluprobe.training._anchor import ANCHOR_WEIGHTS, anchored_scores, parse_candidate
    from halluprobe.training._general import _hyper, _Pool, fit_weighted, mean_source_auroc

    parsed = []
    for name in candidates:
        cand, at, weight = name.partition("@")
        fs, anchored = parse_candidate(cand)
        if not anchored:
            raise ValueError(f"anchored_fitter: {name!r} is not an anchored candidate (O+SET or O+SET@w)")
        w = float(weight) if at else None
        if w is not None and not 0.0 <= w <= 1.0:
            raise ValueError(f"anchored_fitter: {name!r} has a weight outside [0, 1]")
        parsed.append((name, fs, w))

    def pool(p: Pool) -> _Pool:
        return _Pool(p.record_list(), p.labels, p.groups, np.asarray(p.sources))

    def fit(train: Pool, validation: Pool) -> dict[str, tuple[Kind, Scorer]]:
        tr, va = pool(train), pool(validation)
        heads, k = _hyper([fs for _, fs, _ in parsed], head_order, tr, va, A7_SELECTION)
        out: dict[str, tuple[Kind, Scorer]] = {}
        for name, fs, given in parsed:
            probe = fit_weighted(fs, heads, k, tr, va)
            w = given
            if w is None:
                on_val = anchored_scores(probe, tr.records, va.records, ANCHOR_WEIGHTS)
                w = max(ANCHOR_WEIGHTS, key=lambda v: mean_source_auroc(on_val[v], va.y, va.source))

            def scorer(p: Pool, probe=probe, w=w) -> np.ndarray:
                return anchored_scores(probe, tr.records, p.record_list(), (w,))[w]

            out[name] = ("probe", scorer)
        return out

    return fit


def published_fitter(head_order: Sequence[int], logit_names: Sequence[str], toha: bool = False) -> Fitter:
    """The published detectors of `halluprobe.training.fit_published` on the pooled splits (unweighted)."""
    from halluprobe.detectors._published_fit import fit_published

    def fit(train: Pool, validation: Pool) -> dict[str, tuple[Kind, Scorer]]:
        recs = {"train": train.record_list(), "validation": validation.record_list()}
        labels = {"train": train.labels, "validation": validation.labels}
        scorers = fit_published(recs, labels, list(head_order), list(logit_names), toha)

        def scorer(s) -> Scorer:
            return lambda pool: s(pool.record_list())

        return {name: ("detector", scorer(s)) for name, s in scorers.items()}

    return fit


def judge_fitter(scores: Mapping[str, Mapping[str, float]], name: str = "judge") -> Fitter:
    """An LLM judge (zero-fit): the template with the best mean per-source validation AUROC.

    Args:
        scores: ``{template: {example id: score}}``, higher = more likely hallucinated (for example
            `halujudge.LLMJudge.score` of every shipped template); every example of the run needs a score
            under every template.
        name: The method's name in the table.
    """
    from halluprobe.training._general import mean_source_auroc

    if not scores:
        raise ValueError("judge_fitter needs the scores of at least one template")

    def column(template: str, pool: Pool) -> np.ndarray:
        per = scores[template]
        missing = [e.id for e in pool.examples if e.id not in per]
        if missing:
            raise ValueError(f"judge scores: template {template!r} has no score for {missing[0]!r}")
        return np.array([per[e.id] for e in pool.examples], dtype=np.float64)

    def fit(train: Pool, validation: Pool) -> dict[str, tuple[Kind, Scorer]]:
        src = np.asarray(validation.sources)
        by_template = {t: mean_source_auroc(column(t, validation), validation.labels, src) for t in scores}
        best = max(
            by_template, key=lambda t: (np.nan_to_num(by_template[t], nan=-1.0), -list(scores).index(t))
        )
        return {name: ("judge", lambda pool: column(best, pool))}

    return fit


def _split_by_source(pool: Pool, values: np.ndarray) -> dict[str, np.ndarray]:
    src = np.asarray(pool.sources)
    return {s: values[src == s] for s in dict.fromkeys(pool.sources)}


@dataclass(frozen=True)
class _FoldWork:
    """Everything a fold needs."""

    folds: list[tuple[str, list[Example], list[Example], list[Example]]]
    records: Mapping[str, ExampleRecord] | None
    fitters: tuple[Fitter, ...]
    calibration: CalibrationMethod
    threshold: ThresholdRule
    n_bootstrap: int
    seed: int


def _fold_rows(work: _FoldWork, i: int):
    """``(progress message, rows, [(method, (probabilities, labels))])`` of fold ``i``."""
    from halluprobe.evaluation._transfer_table import TransferRow

    name, tr, va, target = work.folds[i]  # every fold's splits hold both labels (check_sources)
    msg = f"held out: {name} ({len(target)} examples; fit on {len(tr)} + {len(va)})"
    rows: list[TransferRow] = []
    probs: list[tuple[str, tuple[np.ndarray, np.ndarray]]] = []
    if len({e.label for e in target}) < 2:
        return msg, rows, probs  # AUROC is undefined on a one-class source
    train, val, tgt = _pool(tr, work.records), _pool(va, work.records), _pool(target, work.records)
    for fitter in work.fitters:
        for method, (kind, score) in fitter(train, val).items():
            raw_val, raw_t = score(val), score(tgt)
            cal = Calibrator(work.calibration).fit(raw_val, val.labels, sample_weight=val.weights)
            p_val, p_t = cal(raw_val), cal(raw_t)
            thr = transfer_threshold(
                _split_by_source(val, p_val), _split_by_source(val, val.labels), work.threshold
            )
            res = evaluate(p_t, tgt.labels, tgt.groups, thr, n_bootstrap=work.n_bootstrap, seed=work.seed)
            best = f1_at(p_t, tgt.labels, select_threshold(p_t, tgt.labels))
            ece = reliability_curve(p_t, tgt.labels).ece
            batch_thr = batch_threshold(p_t, thr)  # the held-out source's own, from its probabilities alone
            flags = p_t >= thr
            rows.append(TransferRow(name, method, kind, res.auroc, res.auroc_ci, res.f1, best, thr, ece,
                                    float(np.mean(flags)), res.n, res.n_positive,
                                    batch_f1=f1_at(p_t, tgt.labels, batch_thr), batch_threshold=batch_thr,
                                    false_alarms=int(np.sum(flags & (tgt.labels == 0))),
                                    detected=int(np.sum(flags & (tgt.labels == 1)))))  # fmt: skip
            probs.append((method, (p_t, tgt.labels)))
    return msg, rows, probs


def leave_one_source_out(
    datasets: Dataset | Sequence[Dataset],
    records: Mapping[str, ExampleRecord] | None = None,
    *,
    fitters: Sequence[Fitter] = (floor_fitter,),
    calibration: CalibrationMethod = "platt",
    threshold: ThresholdRule = "mean-f1",
    held_out: Literal["all", "test"] = "all",
    n_bootstrap: int = 1000,
    seed: int = 42,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
) -> TransferTable:
    """Hold each source out in turn, fit every method on the others, and score the held-out one.

    Args:
        datasets: split datasets; their examples' ``source`` fields name the sources (at least two).
        records: example id -> record, for methods that read the proxy (`probe_fitter`,
            `published_fitter`); ``None`` for text-only methods.
        fitters: what to fit; default the grounding floors (`floor_fitter`). Pass the floors too when
            adding probes, so that every row gets its Δ floor.
        calibration: ``"platt"`` or ``"isotonic"`` (`halluprobe.training._calibration.Calibrator`).
        threshold: ``"mean-f1"`` or ``"calibrated-0.5"`` (`halluprobe.training.transfer_threshold`).
        held_out: ``"all"`` examples of the held-out source, or its ``"test"`` split.
        n_bootstrap: group-bootstrap resamples of each AUROC interval.
        seed: bootstrap seed.
        progress: optional ``(message) -> None`` told about each held-out source.
        jobs: held-out sources scored at once, each in a forked worker process with one BLAS
            thread (Linux and macOS); the table is the same for any ``jobs``.

    Returns:
        A `halluprobe.evaluation.TransferTable` (rows per source and method; Markdown and CSV).

    Raises:
        ValueError: with fewer than two sources, an example id used twice, a fold whose pooled
            training or validation split lacks a class, a missing record, or ``jobs`` < 1.
    """
    from halluprobe.evaluation._transfer_table import TransferRow, TransferTable, with_floor_deltas

    examples = [e for ds in ([datasets] if isinstance(datasets, Dataset) else datasets) for e in ds]
    check_sources(examples, held_out)
    folds = held_out_folds(examples, held_out)
    work = _FoldWork(folds, records, tuple(fitters), calibration, threshold, n_bootstrap, seed)
    say = progress or (lambda m: None)
    rows: list[TransferRow] = []
    probs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for msg, fold_rows, fold_probs in fork_map(lambda i: _fold_rows(work, i), len(folds), jobs):
        say(msg)
        rows += fold_rows
        for method, pair in fold_probs:
            probs.setdefault(method, []).append(pair)
    pooled = {m: reliability_curve(np.concatenate([p for p, _ in v]), np.concatenate([y for _, y in v]))
              for m, v in probs.items()}  # fmt: skip
    return TransferTable(with_floor_deltas(rows), pooled, calibration, threshold, held_out)
