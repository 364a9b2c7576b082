"""A general detector from several sources: `fit_general`, `train_general` (`Detector`s of the general probe).

The recipe is `halluprobe.training._general` (`fit_general_probe`); this module saves its probe as a
`Detector` with the proxy it was extracted with. Scores: higher means more likely hallucinated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from halluprobe.detectors._detector import Detector
from halluprobe.features._records import ExampleRecord
from halluprobe.training._general import GeneralProbe, fit_general_probe


@dataclass
class GeneralFit(GeneralProbe):
    """What `fit_general` chose and fitted: the `GeneralProbe` and the detector made of its probe."""

    detector: Detector = field(kw_only=True)
    """The general detector (calibrated probe, transfer threshold)."""


def fit_general(
    datasets: Sequence[Any],
    records_by_dataset: Mapping[str, Mapping[str, Sequence[ExampleRecord]]],
    *,
    head_order: Sequence[int],
    proxy: str | None = None,
    layers: Sequence[int] | None = None,
    hidden_layers: Sequence[int] = (),
    **kwargs: Any,
) -> GeneralFit:
    """Train a general detector on several sources (`halluprobe.training._general.fit_general_probe`).

    Args:
        datasets: Datasets with distinct names; their examples' ``source`` values are the sources.
        records_by_dataset: ``{dataset name: {"train": records, "validation": records}}``.
        head_order: Flat head indices ranked by induction score (`halluprobe.rank_heads`).
        proxy: Proxy id saved with the detector (None: the default SmolLM2).
        layers: Scored layers of the records (None: all).
        hidden_layers: Hidden layers of the records (as the extraction kept them).
        **kwargs: ``feature_sets``, ``seed``, ``a7_features``, ``l9_features``, ``progress``, ``jobs``,
            ``threshold_rule`` of `fit_general_probe`.

    Raises:
        ValueError: as `fit_general_probe`.
    """
    g = fit_general_probe(datasets, records_by_dataset, head_order=head_order, **kwargs)
    det = Detector.from_probe(g.probe, proxy=proxy, layers=layers, hidden_layers=hidden_layers)
    return GeneralFit(
        g.probe, g.feature_set, g.loso_auroc, g.sources, g.calibration, g.candidate, detector=det
    )


def train_general(
    datasets: Sequence[Any],
    records_by_dataset: Mapping[str, Mapping[str, Sequence[ExampleRecord]]],
    **kwargs: Any,
) -> Detector:
    """The general detector of `fit_general` (same arguments), without the selection details."""
    return fit_general(datasets, records_by_dataset, **kwargs).detector
