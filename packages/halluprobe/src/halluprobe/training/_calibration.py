"""Probabilities and thresholds that mean the same on a new source, and warnings for degenerate fits.

* `Calibrator` maps a detector's raw score (a probe's decision function, a published detector's
  score) to p(hallucinated). ``"platt"`` (default) fits ``sigmoid(a * score + b)`` by weighted
  logistic regression; ``"isotonic"`` fits a monotone step function (scikit-learn's
  ``IsotonicRegression``) and interpolates between its steps. Fit it on the pooled validation
  splits of several sources, with equal weight per source (`source_weights`).
* `expected_calibration_error` uses **equal-mass** bins (each holds the same number of examples,
  ten by default): equal-width bins leave the tails of a confident detector nearly empty and the
  middle crowded.
* `transfer_threshold` picks the probability threshold that maximises the **mean F1 over the
  validation sources**, each source counting once. A threshold chosen on one pooled validation set
  follows the largest source's base rate; the mean over sources favours a threshold that is good
  on each of them. `ThresholdRule` ``"calibrated-0.5"`` is the alternative (the calibrated
  probability's midpoint). It is not the default: F1 rewards recall, so its best threshold usually
  lies below 0.5; held out one source at a time over nine sources, the grounding floors' mean F1 at
  the calibrated 0.5 was 0.59-0.62, at the mean-F1 threshold 0.66.
* `DegenerateFitWarning` is raised by `check_labels` (one class missing, or fewer than
  `MIN_PER_CLASS` examples of a class in a split) and by `check_collapse` (validation
  probabilities collapsed: inter-quartile range below `MIN_IQR`, 0.01). A second rule, "more than
  90% within 0.005 of the threshold", is implied by it: such a band holds both quartiles.

Scores and probabilities: higher means more likely hallucinated; labels 1 = hallucinated.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from halubench_data.metrics import f1_curve

from halluprobe._numeric import sigmoid
from halluprobe.training._thresholds import expected_f1_threshold as expected_f1_threshold

__all__ = [
    "MIN_IQR",
    "MIN_PER_CLASS",
    "CalibrationMethod",
    "Calibrator",
    "DegenerateFitWarning",
    "ReliabilityCurve",
    "ThresholdRule",
    "check_collapse",
    "calibrate_probe",
    "check_labels",
    "degenerate_fit_lines",
    "expected_calibration_error",
    "expected_f1_threshold",
    "plot_reliability",
    "reliability_curve",
    "source_weights",
    "transfer_threshold",
]

CalibrationMethod = Literal["platt", "isotonic"]
ThresholdRule = str
"""``"mean-f1"``, ``"calibrated-0.5"`` or ``"false-alarm@R"`` (`transfer_threshold`)."""
MIN_PER_CLASS = 10
"""Fewer examples than this of one class in the training or validation split warn."""
MIN_IQR = 0.01
"""Validation probabilities whose inter-quartile range is below this warn (collapsed)."""


class DegenerateFitWarning(UserWarning):
    """A fit whose scores or threshold cannot be trusted: a missing class, too few examples, collapse."""


def check_labels(y_train: np.ndarray, y_val: np.ndarray, *, what: str = "fit") -> None:
    """Warn when a split lacks a class or holds fewer than `MIN_PER_CLASS` examples of one.

    Warns:
        DegenerateFitWarning: naming the split and the class counts.
    """
    for split, y in (("training", y_train), ("validation", y_val)):
        y = np.asarray(y)
        counts = (int(np.sum(y == 0)), int(np.sum(y == 1)))
        if min(counts) == 0:
            problem = "lacks one class"
        elif min(counts) < MIN_PER_CLASS:
            problem = f"has fewer than {MIN_PER_CLASS} examples of a class"
        else:
            continue
        warnings.warn(
            f"{what}: the {split} split {problem} ({counts[0]} supported, {counts[1]} hallucinated); "
            "its probabilities and threshold are unreliable",
            DegenerateFitWarning,
            stacklevel=2,
        )


def check_collapse(p_val: np.ndarray, threshold: float, *, what: str = "fit") -> None:
    """Warn when validation probabilities collapsed around the threshold.

    Collapsed: the inter-quartile range of ``p_val`` is below `MIN_IQR`. The message also gives
    the share of probabilities within 0.005 of ``threshold``.

    Warns:
        DegenerateFitWarning: with the range of the probabilities and the threshold.
    """
    p = np.asarray(p_val, dtype=np.float64)
    if p.size == 0:
        return
    q1, q3 = np.quantile(p, [0.25, 0.75])
    near = float(np.mean(np.abs(p - threshold) <= 0.005))
    if q3 - q1 < MIN_IQR:
        warnings.warn(
            f"{what}: validation probabilities collapsed ({p.min():.3f}-{p.max():.3f}, inter-quartile "
            f"range {q3 - q1:.4f}, {near:.0%} within 0.005 of the threshold {threshold:.3f}); the "
            "detector barely separates the classes",
            DegenerateFitWarning,
            stacklevel=2,
        )


@contextlib.contextmanager
def degenerate_fit_lines(prog: str) -> Iterator[None]:
    """Inside the block, each `DegenerateFitWarning` is printed once as ``prog: warning: message``.

    One line on stderr (the CLI convention), even with ``--quiet``; other warnings are untouched.
    """
    seen: set[str] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("always", DegenerateFitWarning)
        show = warnings.showwarning

        def one_line(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
            if not issubclass(category, DegenerateFitWarning):
                return show(message, category, filename, lineno, file, line)
            text = " ".join(str(message).split())
            if text not in seen:
                seen.add(text)
                print(f"{prog}: warning: {text}", file=sys.stderr, flush=True)
            return None

        warnings.showwarning = one_line
        yield


def source_weights(sources: Sequence[str]) -> np.ndarray:
    """``[n] float64`` weights giving every source the same total weight; they average to 1."""
    _, inv, counts = np.unique(np.asarray([str(s) for s in sources]), return_inverse=True, return_counts=True)
    w = 1.0 / counts[inv.reshape(-1)]
    return w * (len(w) / w.sum())


@dataclass
class Calibrator:
    """Maps raw scores to calibrated p(hallucinated); fit on validation scores and labels.

    Attributes:
        method: ``"platt"`` or ``"isotonic"``.
        a_: Platt slope (``p = sigmoid(a_ * score + b_)``).
        b_: Platt intercept.
        x_: isotonic step positions (ascending scores).
        y_: isotonic probabilities at ``x_``.
    """

    method: CalibrationMethod = "platt"
    a_: float = 1.0
    b_: float = 0.0
    x_: np.ndarray = field(default_factory=lambda: np.zeros(0))
    y_: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def fit(self, scores: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None) -> Calibrator:
        """Fit on ``scores: [n]`` and labels ``y: [n]`` (both classes needed); returns self."""
        s, y = np.asarray(scores, dtype=np.float64), np.asarray(y, dtype=np.int64)
        if s.shape != y.shape or s.ndim != 1 or len(set(y.tolist())) != 2:
            raise ValueError(
                f"calibration needs 1-D scores and labels of both classes, got {s.shape}, {y.shape}"
            )
        if self.method == "platt":
            from sklearn.linear_model import LogisticRegression

            lr = LogisticRegression(C=1e6, max_iter=1000).fit(s[:, None], y, sample_weight=sample_weight)
            self.a_, self.b_ = float(lr.coef_[0, 0]), float(lr.intercept_[0])
        elif self.method == "isotonic":
            from sklearn.isotonic import IsotonicRegression

            iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0)
            iso.fit(s, y, sample_weight=sample_weight)
            self.x_, self.y_ = np.asarray(iso.X_thresholds_), np.asarray(iso.y_thresholds_)
        else:
            raise ValueError(f"calibration method must be 'platt' or 'isotonic', got {self.method!r}")
        return self

    def __call__(self, scores: np.ndarray) -> np.ndarray:
        """``[n] float64`` calibrated probabilities of ``scores: [n]``."""
        s = np.asarray(scores, dtype=np.float64)
        if self.method == "isotonic":
            return np.interp(s, self.x_, self.y_)
        return sigmoid(self.a_ * s + self.b_)


def _bins(p: np.ndarray, n_bins: int) -> list[np.ndarray]:
    """Indices of ``p`` in ``n_bins`` equal-mass bins (sorted by probability; sizes differ by one at most)."""
    order = np.argsort(p, kind="stable")
    return [b for b in np.array_split(order, min(n_bins, p.size)) if b.size]


@dataclass(frozen=True)
class ReliabilityCurve:
    """Mean predicted probability against the observed rate of hallucination, per equal-mass bin."""

    predicted: np.ndarray
    """``[n_bins] float64``: mean probability of each bin."""
    observed: np.ndarray
    """``[n_bins] float64``: share of hallucinated examples in each bin."""
    counts: np.ndarray
    """``[n_bins] int64``: examples per bin."""
    ece: float
    """Expected calibration error: ``sum(counts * |predicted - observed|) / sum(counts)``."""


def reliability_curve(probs: np.ndarray, y: np.ndarray, n_bins: int = 10) -> ReliabilityCurve:
    """The reliability curve and ECE of probabilities ``probs: [n]`` against labels ``y: [n]``.

    Bins hold equal numbers of examples (equal mass), sorted by probability.

    Raises:
        ValueError: on empty or mismatched inputs, or probabilities outside [0, 1].
    """
    p, y = np.asarray(probs, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if p.ndim != 1 or p.shape != y.shape or p.size == 0:
        raise ValueError(
            f"probabilities and labels must be 1-D of equal, non-zero length, got {p.shape}, {y.shape}"
        )
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError("probabilities must lie in [0, 1]")
    bins = _bins(p, n_bins)
    pred = np.array([p[b].mean() for b in bins])
    obs = np.array([y[b].mean() for b in bins])
    counts = np.array([b.size for b in bins], dtype=np.int64)
    return ReliabilityCurve(pred, obs, counts, float(np.sum(counts * np.abs(pred - obs)) / counts.sum()))


def expected_calibration_error(probs: np.ndarray, y: np.ndarray, n_bins: int = 10) -> float:
    """ECE of ``probs: [n]`` against ``y: [n]`` over ``n_bins`` equal-mass bins (`reliability_curve`)."""
    return reliability_curve(probs, y, n_bins).ece


def transfer_threshold(
    probs: Mapping[str, np.ndarray], labels: Mapping[str, np.ndarray], rule: ThresholdRule = "mean-f1"
) -> float:
    """The probability threshold meant to transfer to sources never seen.

    Args:
        probs: source -> ``[n_s]`` calibrated validation probabilities.
        labels: source -> ``[n_s]`` their labels.
        rule: ``"mean-f1"``: the candidate (a validation probability) with the highest mean F1 over
            the sources that have a hallucinated example, ties to the higher threshold;
            ``"calibrated-0.5"``: 0.5; ``"false-alarm@R"``: the lowest threshold whose false-alarm
            rate (the share of supported answers flagged), averaged over the sources, is at most ``R``
            (`false_alarm_threshold`), so that a user scoring one answer at a time is not told
            "hallucinated" about most supported answers.
    """
    from halluprobe.training._thresholds import check_threshold_rule, false_alarm_threshold

    check_threshold_rule(rule)
    if rule == "calibrated-0.5":
        return 0.5
    if rule.startswith("false-alarm@"):
        return false_alarm_threshold(probs, labels, float(rule.partition("@")[2]))
    names = [n for n in probs if np.asarray(labels[n]).sum() > 0]
    if not names:
        raise ValueError("transfer_threshold needs a hallucinated validation example")
    cands = np.unique(np.concatenate([np.asarray(probs[n], dtype=np.float64) for n in names]))
    if cands.size > 512:  # quantiles keep the search linear in the data
        cands = np.unique(np.quantile(cands, np.linspace(0, 1, 513)))
    mean_f1 = np.mean([f1_curve(probs[n], labels[n], cands) for n in names], axis=0)
    best = np.flatnonzero(mean_f1 >= mean_f1.max() - 1e-12)
    return float(cands[best[-1]])


PANELS_FROM = 9
"""`plot_reliability` draws one panel per curve from this many curves on (one axes gets unreadable)."""


def plot_reliability(path, curves: Mapping[str, ReliabilityCurve], title: str = "Reliability") -> None:
    """Write a reliability diagram to the PNG ``path``: ECE beside each curve's name.

    Up to ``PANELS_FROM - 1`` curves share one axes (one line each, ECE in the legend); more get one
    small panel each, five to a row, the diagonal drawn in every panel.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from halubench_data.files import atomic_path

    if not curves:
        raise ValueError("plot_reliability needs at least one curve")
    xlabel, ylabel = "mean predicted p(hallucinated), equal-mass bins", "observed share hallucinated"
    if len(curves) < PANELS_FROM:
        fig, ax = plt.subplots(figsize=(7.5, 5))
        ax.plot([0, 1], [0, 1], ":", color="grey", lw=0.8)
        for name, c in curves.items():
            ax.plot(c.predicted, c.observed, marker="o", ms=3, lw=1.2, label=f"{name} (ECE {c.ece:.3f})")
        ax.set(xlabel=xlabel, ylabel=ylabel, xlim=(0, 1), ylim=(0, 1), aspect="equal", title=title)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    else:
        cols = 5
        rows = -(-len(curves) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(2.3 * cols, 2.5 * rows), sharex=True, sharey=True)
        flat = list(np.ravel(axes))
        for ax, (name, c) in zip(flat, curves.items(), strict=False):
            ax.plot([0, 1], [0, 1], ":", color="grey", lw=0.8)
            ax.plot(c.predicted, c.observed, marker="o", ms=2.5, lw=1.1)
            ax.set(xlim=(0, 1), ylim=(0, 1), aspect="equal")
            ax.set_title(f"{name}\nECE {c.ece:.3f}", fontsize=8)
            ax.tick_params(labelsize=7)
        for ax in flat[len(curves) :]:
            ax.axis("off")
        for ax in flat[max(0, len(curves) - cols) : len(curves)]:  # the lowest panel of each column
            ax.xaxis.set_tick_params(labelbottom=True)
        fig.supxlabel(xlabel, fontsize=9)
        fig.supylabel(ylabel, fontsize=9)
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png", bbox_inches="tight")  # the legend outside the axes too
    plt.close(fig)


def calibrate_probe(
    fit: Any,
    val_records: list[Any],
    y_val: np.ndarray,
    val_sources: Sequence[str],
    rule: ThresholdRule = "mean-f1",
) -> Any:
    """A copy of a `halluprobe.ProbeFit` whose probabilities are Platt-calibrated and thresholded to transfer.

    Platt scaling of the probe's decision function on the validation records (each source weighted
    equally) is folded into the logistic weights (``a * (w.x + c) + b`` stays linear), so a saved
    detector carries it unchanged. The threshold follows `transfer_threshold` with ``rule`` over the
    validation sources; the validation AUROC and ``C`` are kept.

    Args:
        fit: the fitted probe.
        val_records: its validation records.
        y_val: ``[n_val]`` their labels.
        val_sources: ``[n_val]`` their sources (`halubench_data.Example.source`).
        rule: the threshold rule.
    """
    from dataclasses import replace

    y = np.asarray(y_val, dtype=np.int64)
    z = fit.decision_function(val_records)
    cal = Calibrator("platt").fit(z, y, sample_weight=source_weights(val_sources))
    out = replace(fit, coef=fit.coef * cal.a_, intercept=fit.intercept * cal.a_ + cal.b_)
    p = out.predict_proba(val_records)[:, 1]  # the folded probe's own numbers: the threshold is one of them
    names = [str(s) for s in val_sources]
    by = {n: np.flatnonzero(np.asarray(names) == n) for n in dict.fromkeys(names)}
    out.threshold = transfer_threshold(
        {n: p[i] for n, i in by.items()}, {n: y[i] for n, i in by.items()}, rule
    )
    return out
