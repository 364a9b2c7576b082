"""The typed result of `halluprobe.evaluation.leave_one_source_out`, and its Markdown, CSV and plots."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np
from halubench_data.files import atomic_write_text
from halubench_data.floors import FLOORS
from halubench_data.metrics import markdown_table

from halluprobe.training._calibration import ReliabilityCurve, plot_reliability

__all__ = [
    "FLOOR_MARGIN",
    "F1_MARGIN",
    "TransferRow",
    "TransferSummary",
    "TransferTable",
    "with_floor_deltas",
]

FLOOR_MARGIN = 0.03
"""A method "beats the floor" on a source when its AUROC is at least this above the best floor's."""
F1_MARGIN = 0.05
"""A threshold "transfers" on a source when its F1 is within this of the source's best-threshold F1."""


@dataclass(frozen=True)
class TransferRow:
    """One method scored on one held-out source, fitted and calibrated on the other sources."""

    source: str
    """The held-out source."""
    method: str
    """Method name (a feature set, a published detector, a floor)."""
    kind: str
    """``probe``, ``detector``, ``floor``, ..."""
    auroc: float
    """AUROC of the calibrated probability on the held-out source."""
    auroc_ci: tuple[float, float]
    """95% group-bootstrap interval of the AUROC."""
    f1: float
    """F1 at the transferred threshold."""
    best_f1: float
    """The best F1 of any threshold on the held-out source (an oracle, for reference)."""
    threshold: float
    """The transferred probability threshold (chosen on the other sources' validation splits)."""
    ece: float
    """Expected calibration error on the held-out source (10 equal-mass bins)."""
    flagged: float
    """Share of held-out examples at or above the threshold."""
    n: int
    """Held-out examples scored."""
    n_positive: int
    """Hallucinated held-out examples."""
    delta_floor: float = float("nan")
    """AUROC minus the best floor's AUROC on this source (NaN without floors)."""
    batch_f1: float = float("nan")
    """F1 at the held-out source's own expected-F1 threshold (`halluprobe._threshold.batch_threshold` of
    its calibrated probabilities: no label of the source is read)."""
    batch_threshold: float = float("nan")
    """That threshold."""
    false_alarms: int = 0
    """Supported held-out examples at or above the transferred threshold."""
    detected: int = 0
    """Hallucinated held-out examples at or above it."""

    @property
    def false_alarm_rate(self) -> float:
        """Share of the supported held-out examples flagged (NaN without one)."""
        neg = self.n - self.n_positive
        return self.false_alarms / neg if neg else float("nan")

    @property
    def recall(self) -> float:
        """Share of the hallucinated held-out examples flagged (NaN without one)."""
        return self.detected / self.n_positive if self.n_positive else float("nan")


@dataclass(frozen=True)
class TransferSummary:
    """One method over every held-out source."""

    method: str
    """Method name."""
    kind: str
    """Its kind."""
    sources: int
    """Held-out sources scored."""
    mean_auroc: float
    """Mean AUROC over them (each source counts once)."""
    mean_delta_floor: float
    """Mean Δ floor."""
    beats_floor: int
    """Sources where AUROC >= best floor + `FLOOR_MARGIN`."""
    mean_f1: float
    """Mean F1 at the transferred threshold."""
    mean_best_f1: float
    """Mean best-threshold F1."""
    f1_transfers: int
    """Sources where F1 >= best-threshold F1 - `F1_MARGIN`."""
    pooled_ece: float
    """ECE of the probabilities pooled over every held-out source (10 equal-mass bins)."""
    mean_batch_f1: float = float("nan")
    """Mean F1 at each source's expected-F1 threshold (`TransferRow.batch_f1`)."""
    batch_f1_transfers: int = 0
    """Sources where that F1 >= best-threshold F1 - `F1_MARGIN`."""
    pooled_false_alarm_rate: float = float("nan")
    """Share of every held-out source's supported examples flagged at the transferred thresholds."""
    pooled_recall: float = float("nan")
    """Share of every held-out source's hallucinated examples flagged at the transferred thresholds."""


def with_floor_deltas(rows: Sequence[TransferRow]) -> list[TransferRow]:
    """``rows`` with ``delta_floor`` set: AUROC minus the best floor's AUROC on the same source."""
    best: dict[str, float] = {}
    for r in rows:
        if r.method in FLOORS and np.isfinite(r.auroc):
            best[r.source] = max(best.get(r.source, -np.inf), r.auroc)
    return [replace(r, delta_floor=r.auroc - best[r.source]) if r.source in best else r for r in rows]


def _ratio(num: int, den: int) -> float:
    return num / den if den else float("nan")


def _mean(values: Sequence[float]) -> float:
    v = [x for x in values if np.isfinite(x)]
    return float(np.mean(v)) if v else float("nan")


@dataclass(frozen=True)
class TransferTable:
    """Leave-one-source-out results: one row per (held-out source, method)."""

    rows: tuple[TransferRow, ...] | list[TransferRow]
    """Every (source, method) result, sources in input order."""
    reliability: Mapping[str, ReliabilityCurve]
    """Method -> reliability curve pooled over the held-out sources."""
    calibration: str = "platt"
    """Calibration method used."""
    threshold_rule: str = "mean-f1"
    """Threshold rule used."""
    held_out: str = "all"
    """Which examples of a held-out source were scored (``all`` or ``test``)."""

    @property
    def sources(self) -> list[str]:
        """Held-out sources, in order."""
        return list(dict.fromkeys(r.source for r in self.rows))

    @property
    def methods(self) -> list[str]:
        """Methods, in order."""
        return list(dict.fromkeys(r.method for r in self.rows))

    def summary(self) -> list[TransferSummary]:
        """One `TransferSummary` per method."""
        out = []
        for m in self.methods:
            rs = [r for r in self.rows if r.method == m]
            out.append(TransferSummary(
                m, rs[0].kind, len(rs), _mean([r.auroc for r in rs]), _mean([r.delta_floor for r in rs]),
                sum(r.delta_floor >= FLOOR_MARGIN for r in rs), _mean([r.f1 for r in rs]),
                _mean([r.best_f1 for r in rs]), sum(r.f1 >= r.best_f1 - F1_MARGIN for r in rs),
                self.reliability[m].ece if m in self.reliability else float("nan"),
                _mean([r.batch_f1 for r in rs]), sum(r.batch_f1 >= r.best_f1 - F1_MARGIN for r in rs),
                _ratio(sum(r.false_alarms for r in rs), sum(r.n - r.n_positive for r in rs)),
                _ratio(sum(r.detected for r in rs), sum(r.n_positive for r in rs)),
            ))  # fmt: skip
        return out

    def to_markdown(self) -> str:
        """Summary per method, then the AUROC (Δ floor) matrix of methods × held-out sources."""
        n = len(self.sources)
        head = ("method", "kind", "mean AUROC", "mean Δ floor", f"≥ floor+{FLOOR_MARGIN}", "mean F1",
                "mean best F1", f"F1 within {F1_MARGIN}", "mean batch F1", f"batch F1 within {F1_MARGIN}",
                "pooled ECE", "false alarms", "recall")  # fmt: skip
        summary = self.summary()
        body = [  # counts are over the sources a method was scored on (fewer for a run cut short)
            (s.method, s.kind, s.mean_auroc, f"{s.mean_delta_floor:+.3f}", f"{s.beats_floor}/{s.sources}",
             s.mean_f1, s.mean_best_f1, f"{s.f1_transfers}/{s.sources}", s.mean_batch_f1,
             f"{s.batch_f1_transfers}/{s.sources}", s.pooled_ece, s.pooled_false_alarm_rate, s.pooled_recall)
            for s in summary
        ]  # fmt: skip
        partial = [s for s in summary if s.sources < n]
        idx = {(r.method, r.source): r for r in self.rows}
        matrix = [
            (m, *(f"{idx[m, s].auroc:.3f} ({idx[m, s].delta_floor:+.3f})" if (m, s) in idx else "-"
                  for s in self.sources))
            for m in self.methods
        ]  # fmt: skip
        lines = [
            f"Leave-one-source-out: each source scored ({self.held_out} of its examples) by methods fitted",
            "on the others' training splits (sources weighted equally); calibration "
            f"({self.calibration}) and threshold ({self.threshold_rule}) from the others' validation",
            "splits.",
            "Δ floor: AUROC minus the best grounding floor's on the same source. ECE: 10 equal-mass bins.",
            "Batch F1: F1 at the threshold that maximises the expected F1 of the held-out source's own",
            "calibrated probabilities (no label of it read). False alarms and recall: the shares of the",
            "held-out supported and hallucinated answers at or above the transferred threshold, pooled.",
            "",
            markdown_table(head, body),
            "",
            *(
                [
                    f"Scored on fewer sources than the table ({n}): "
                    + "; ".join(
                        f"{s.method} on {s.sources} (no {', '.join(self._missing(s.method))})"
                        for s in partial
                    )
                    + ". Their means and counts are over those sources only; compare them per source below.",
                    "",
                ]
                if partial
                else []
            ),  # fmt: skip
            "AUROC (Δ floor) per held-out source:",
            "",
            markdown_table(("method", *self.sources), matrix),
            "",
        ]
        return "\n".join(lines)

    def _missing(self, method: str) -> list[str]:
        """Held-out sources of the table with no row of ``method``."""
        have = {r.source for r in self.rows if r.method == method}
        return [s for s in self.sources if s not in have]

    def to_csv(self) -> str:
        """One CSV row per (source, method), every `TransferRow` field (intervals as two columns)."""
        names = [f.name for f in fields(TransferRow) if f.name != "auroc_ci"]
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow([*names, "auroc_lo", "auroc_hi"])
        for r in self.rows:
            d = asdict(r)
            w.writerow([*(d[k] for k in names), *r.auroc_ci])
        return buf.getvalue()

    def write(self, out: str | Path) -> list[Path]:
        """Write ``transfer.md``, ``transfer.csv``, ``reliability.png`` and ``.json`` under ``out``.

        ``reliability.json`` holds the curves drawn (method -> ``predicted``, ``observed``, ``counts``,
        ``ece``), so the diagram can be redrawn without the run. Returns the paths written.
        """
        out = Path(out)
        paths = [
            atomic_write_text(out / "transfer.md", "# Transfer\n\n" + self.to_markdown() +
                              "\n![reliability](reliability.png)\n", overwrite=True),
            atomic_write_text(out / "transfer.csv", self.to_csv(), overwrite=True),
        ]  # fmt: skip
        if self.reliability:
            plot_reliability(
                out / "reliability.png", self.reliability, "Reliability (held-out sources, pooled)"
            )
            curves = {
                m: {"predicted": c.predicted.tolist(), "observed": c.observed.tolist(),
                    "counts": c.counts.tolist(), "ece": c.ece}
                for m, c in self.reliability.items()
            }  # fmt: skip
            text = json.dumps(curves, indent=1) + "\n"
            paths.append(out / "reliability.png")
            paths.append(atomic_write_text(out / "reliability.json", text, overwrite=True))
        return paths
