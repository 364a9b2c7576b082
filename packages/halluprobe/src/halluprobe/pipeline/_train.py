"""[`halluprobe.train`][]: a detector from labelled examples in one call.

The call runs what ``halluprobe train`` runs for one feature set: the proxy's records through
`halluprobe.extract_records` (cached by content when ``cache`` names a folder), then
[`Detector.fit`][halluprobe.Detector.fit], which ranks the induction heads on the proxy, fits the
probe with `halluprobe.train_feature_sets` and calibrates it on validation. Splits, groups and sources
come from the examples; the test split is never read.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from halubench_data import Dataset, Example

    from halluprobe.detectors._detector import Detector

FIT_SPLITS = ("train", "validation")
"""The splits ``train`` reads when the examples carry splits (the test split stays untouched)."""


def as_examples(examples: Dataset | Iterable[Example | Mapping[str, Any]]) -> list[Example]:
    """``halubench_data.Example`` objects of a Dataset, or of a list of Examples and mappings.

    A mapping needs ``"context"``, ``"answer"`` and ``"label"`` (1 = hallucinated, 0 = supported);
    ``"question"`` defaults to ``""``, ``"id"`` to ``"ex{i}"``, ``"group"`` to the id and ``"source"``
    to ``"data"``; ``"split"`` and ``"spans"`` are read when present.

    Raises:
        ValueError: a row that is neither (naming its index and field), or duplicate ids.
    """
    from halubench_data import Example, example_from_dict

    rows = list(getattr(examples, "examples", examples))
    out = []
    for i, row in enumerate(rows):
        if isinstance(row, Example):
            out.append(row)
            continue
        if not isinstance(row, Mapping):
            raise ValueError(
                f"example {i}: expected a halubench_data.Example or a mapping, got {type(row).__name__}"
            )
        rid = str(row.get("id", f"ex{i}"))
        filled = {"question": "", "source": "data", "group": rid, **row, "id": rid}
        try:
            out.append(example_from_dict(filled))
        except ValueError as exc:
            raise ValueError(f"example {i}: {exc}") from None
    ids = [ex.id for ex in out]
    if len(set(ids)) != len(ids):
        raise ValueError("the examples need distinct ids")
    if not out:
        raise ValueError("no examples to train on")
    return out


def _fit_rows(examples: list[Example]) -> tuple[list[Example], np.ndarray | None]:
    """The examples ``fit`` reads and its validation mask (None: ``fit`` holds out validation itself)."""
    with_split = [ex.split is not None for ex in examples]
    if not any(with_split):
        return examples, None
    if not all(with_split):
        raise ValueError("some examples have a split and others none: give every example one, or none")
    rows = [ex for ex in examples if ex.split in FIT_SPLITS]
    if not any(ex.split == "validation" for ex in rows):
        raise ValueError("the examples have splits but no validation split: give one, or no splits at all")
    return rows, np.array([ex.split == "validation" for ex in rows])


def train(
    examples: Dataset | Iterable[Example | Mapping[str, Any]],
    *,
    feature_set: str = "A7L9",
    proxy: str | None = None,
    layers: Sequence[int] | None = None,
    hidden_layers: Sequence[int] | None = None,
    device: str | None = None,
    batch_size: int = 8,
    token_budget: int | None = 16384,
    cache: str | Path | None = None,
    validation_fraction: float = 0.25,
    random_state: int = 0,
    progress: Callable[[str], None] | None = None,
) -> Detector:
    """Train a hallucination detector on labelled examples (higher scores = more likely hallucinated).

    Args:
        examples: A `halubench_data.Dataset`, or a list of `halubench_data.Example` or mappings
            (`as_examples`). With splits, the train split fits and the validation split chooses (the
            test split is not read); without, a stratified group split holds out ``validation_fraction``
            of the examples (seed ``random_state``). ``group`` keeps related examples on one side;
            ``source`` weighs each source the same in the calibration.
        feature_set: The probe's blocks (``"A7L9"``, ``"GA7H64L9"``, ...).
        proxy: Proxy for [`flashstats_hf.load_model`][] (None: the default SmolLM2).
        layers: Scored layers (None: all).
        hidden_layers: Kept hidden layers (None: the middle one).
        device: Device of the proxy (None: CUDA when available).
        batch_size: Most examples per proxy forward.
        token_budget: Most tokens per proxy forward.
        cache: A folder that keeps the records, so a second call on the same examples and proxy does not
            run the proxy again (None: a temporary folder).
        validation_fraction: Held-out share when the examples have no splits.
        random_state: Seed of that split.
        progress: Told about each step (``message -> None``).

    Returns:
        The fitted [`Detector`][halluprobe.Detector], its proxy loaded; ``save`` it or score with it.

    Raises:
        ValueError: bad examples, a split without both labels, or an unknown feature set.
    """
    from flashstats_hf import load_model

    from halluprobe.blocks._blocks import parse_feature_set
    from halluprobe.detectors._detector import Detector
    from halluprobe.features._cache import FeatureCache
    from halluprobe.features._extract import ProxyExtractor, extract_records

    parse_feature_set(feature_set)  # before the proxy loads
    rows, validation = _fit_rows(as_examples(examples))
    note = progress or (lambda msg: None)
    note(f"loading the proxy ({proxy or 'default'})")
    model, tok = load_model(proxy, device=device)
    ext = ProxyExtractor(
        model,
        tok,
        None if layers is None else tuple(layers),
        None if hidden_layers is None else tuple(hidden_layers),
    )
    det = Detector(
        feature_set, proxy=proxy, layers=ext.layers, hidden_layers=ext.hidden_layers, device=device,
        validation_fraction=validation_fraction, random_state=random_state, batch_size=batch_size,
    )  # fmt: skip
    det._extractor = ext
    with tempfile.TemporaryDirectory(prefix="halluprobe-") as tmp:
        store = FeatureCache(
            Path(cache if cache is not None else tmp), {**ext.settings, "proxy": proxy or "default"}
        )
        note(f"extracting the records of {len(rows)} examples")
        records = extract_records(
            rows, ext, store, batch_size=batch_size, token_budget=token_budget, length=ext.length
        )
    note(f"fitting {feature_set}")
    return det.fit(
        records, [ex.label for ex in rows], groups=[ex.group for ex in rows],
        sources=[ex.source for ex in rows], validation=validation,
    )  # fmt: skip
