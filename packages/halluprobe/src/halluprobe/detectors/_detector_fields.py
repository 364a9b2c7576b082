"""The fields of a detector's ``detector.json``, each checked by a small function of one table.

`DETECTOR_FIELDS` checks a probe detector's document field by field (presence, type, range,
finiteness), `check_document` adds their agreement with each other, and `check_against_proxy` the
layer and head indices once the proxy's size is known. Another kind of detector checks its own document
with `check_fields` and a table of its own, reusing these checks where its fields are the same. Every
error names the file and the field. No torch is imported, so the CLI runs them before the ML stack loads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def number(
    doc: dict, key: str, where: str, *, lo: float | None = None, hi: float | None = None, field: str = ""
) -> float:
    """``doc[key]`` as a float, or a ValueError naming ``where`` and ``field`` (default ``key``)."""
    value, field = doc.get(key), field or key
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: field {field!r} must be a finite number, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{where}: field {field!r} must lie in [{lo}, {hi}], got {value!r}")
    return float(value)


def _int_list(value: Any, key: str, where: str, *, optional: bool, nonempty: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    ):
        raise ValueError(f"{where}: field {key!r} must be a list of non-negative integers, got {value!r}")
    if nonempty and not value:
        raise ValueError(f"{where}: field {key!r} must name at least one layer (null: all), got []")
    if len(set(value)) != len(value):
        raise ValueError(f"{where}: field {key!r} names a layer twice: {value!r}")


FieldCheck = Callable[[dict[str, Any], str], None]
"""A check of one field of a detector document: ``(document, where)``, a ValueError naming both."""


def _required(key: str, check: FieldCheck) -> FieldCheck:
    def run(doc: dict[str, Any], where: str) -> None:
        if key not in doc:
            raise ValueError(f"{where}: field {key!r} is missing")
        check(doc, where)

    return run


def _number(key: str, lo: float | None = None, hi: float | None = None) -> FieldCheck:
    def run(doc: dict[str, Any], where: str) -> None:
        number(doc, key, where, lo=lo, hi=hi)

    return run


def _text(key: str, *, nullable: bool) -> FieldCheck:
    def run(doc: dict[str, Any], where: str) -> None:
        value = doc[key]
        if (value is None and nullable) or (isinstance(value, str) and value):
            return
        what = "a non-empty string" + (" or null" if nullable else "")
        raise ValueError(f"{where}: field {key!r} must be {what}, got {value!r}")

    return run


def _layers(key: str, *, optional: bool) -> FieldCheck:
    def run(doc: dict[str, Any], where: str) -> None:
        _int_list(doc[key], key, where, optional=optional, nonempty=True)

    return run


def _val_auroc(doc: dict[str, Any], where: str) -> None:
    if doc["val_auroc"] is not None:  # null when validation had one class
        number(doc, "val_auroc", where, lo=0.0, hi=1.0)


def _blocks(doc: dict[str, Any], where: str) -> None:
    blocks = doc["blocks"]
    if not isinstance(blocks, list) or not blocks or not all(isinstance(b, dict) for b in blocks):
        raise ValueError(f"{where}: field 'blocks' must be a non-empty list of objects")


SELECTION_RANGES: dict[str, tuple[float | None, float | None]] = {
    "loso_auroc": (0.0, 1.0),
    "overlap_weight": (0.0, 1.0),
    "probe_weight": (0.0, 1.0),
    "calibration_slope": (1e-6, None),  # a slope <= 0 would turn the detector's ranking upside down
    "threshold_false_alarm_rate": (0.0, 1.0),
    "K": (1.0, None),
    "k": (1.0, None),
}
"""Bounds of the ``selection`` fields that training writes; any other selection field is a finite number."""


def _selection(doc: dict[str, Any], where: str) -> None:
    selection = doc.get("selection", {})
    if not isinstance(selection, dict):
        raise ValueError(f"{where}: field 'selection' must be an object")
    for key in selection:
        lo, hi = SELECTION_RANGES.get(key, (None, None))
        number(selection, key, where, lo=lo, hi=hi, field=f"selection.{key}")
    for key in ("K", "k"):
        if key in selection and float(selection[key]) != int(selection[key]):
            raise ValueError(
                f"{where}: field 'selection.{key}' must be a whole number, got {selection[key]!r}"
            )
    if {"overlap_weight", "probe_weight"} <= set(selection):
        total = float(selection["overlap_weight"]) + float(selection["probe_weight"])
        if abs(total - 1.0) > 1e-6:
            raise ValueError(
                f"{where}: fields 'selection.overlap_weight' and 'selection.probe_weight' must add up to 1, "
                f"got {total!r}"
            )


DETECTOR_FIELDS: dict[str, FieldCheck] = {
    "threshold": _required("threshold", _number("threshold", 0.0, 1.0)),
    "intercept": _required("intercept", _number("intercept")),
    "C": _required("C", _number("C", 0.0)),
    "val_auroc": _required("val_auroc", _val_auroc),
    "feature_set": _required("feature_set", _text("feature_set", nullable=False)),
    "proxy": _required("proxy", _text("proxy", nullable=True)),
    "layers": _required("layers", _layers("layers", optional=True)),
    "hidden_layers": _required("hidden_layers", _layers("hidden_layers", optional=False)),
    "blocks": _required("blocks", _blocks),
    "selection": _selection,
}
"""The checks of a probe detector's ``detector.json``, one per field (in order). Another kind of detector
checks its own document with `check_fields` and a table of its own (sharing these where its fields are
the same)."""


def check_fields(doc: Any, where: str, checks: Mapping[str, FieldCheck]) -> None:
    """Run ``checks`` on the document ``doc`` read from ``where``.

    Raises:
        ValueError: naming ``where`` (the file) and the first field that fails.
    """
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    for check in checks.values():
        check(doc, where)


def check_document(doc: Any, where: str) -> None:
    """Every field a verdict depends on, then their agreement with each other.

    Presence, types, ranges and finiteness of each field (`DETECTOR_FIELDS`) come first.

    Raises:
        ValueError: naming ``where`` (the file) and the field.
    """
    check_fields(doc, where, DETECTOR_FIELDS)
    _check_meaning(doc, where)


def check_against_proxy(detector: Any, n_layers: int, n_heads: int) -> None:
    """The layer and head indices of ``detector`` exist in a proxy of ``n_layers`` layers, ``n_heads`` heads.

    Raises:
        ValueError: naming the detector's file (or ``detector``) and the field out of range.
    """
    source = getattr(detector, "source", None)
    where = "detector" if source is None else str(Path(source) / "detector.json")
    layers = detector.layers
    if layers is not None and (not layers or max(layers) >= n_layers):
        raise ValueError(
            f"{where}: field 'layers' is {list(layers)!r}; the proxy has layers 0-{n_layers - 1}"
        )
    hidden = list(getattr(detector, "hidden_layers_", None) or ())
    if hidden and max(hidden) > n_layers:  # hidden state 0 is the embedding, n_layers the last layer
        raise ValueError(
            f"{where}: field 'hidden_layers' is {hidden!r}; the proxy has hidden states 0-{n_layers}"
        )
    scored = n_layers if layers is None else len(layers)
    for i, block in enumerate(detector.probe_.blocks):
        heads = block.config.get("heads", ()) if block.name == "A7" else ()
        bad = [h for h in heads if not 0 <= int(h) < scored * n_heads]
        if bad:
            raise ValueError(
                f"{where}: field 'blocks[{i}].heads' holds head {bad[0]}; the {scored} scored layers of the "
                f"proxy have heads 0-{scored * n_heads - 1}"
            )


def _check_meaning(doc: dict[str, Any], where: str) -> None:
    """The fields agree with each other: blocks with the feature set, K and k with the blocks, H64's layer."""
    from halluprobe.blocks._names import BLOCK_NAMES, parse_feature_set

    names = [b.get("name") for b in doc["blocks"]]
    for i, name in enumerate(names):
        if name not in BLOCK_NAMES:
            raise ValueError(
                f"{where}: field 'blocks[{i}]' names an unknown feature block {name!r}; expected one of "
                f"{list(BLOCK_NAMES)}"
            )
    try:
        expected = list(parse_feature_set(doc["feature_set"]))
    except ValueError as exc:
        raise ValueError(f"{where}: field 'feature_set': {exc}") from None
    if names != expected:
        raise ValueError(
            f"{where}: field 'feature_set' is {doc['feature_set']!r} (blocks {expected}) but field "
            f"'blocks' holds {names}"
        )
    selection = doc.get("selection", {})
    by_name = dict(zip(names, doc["blocks"], strict=True))
    implied = {
        "K": len(by_name["A7"].get("heads", ())) if "A7" in by_name else None,
        "k": by_name["A64"].get("k") if "A64" in by_name else None,
    }
    for key, value in implied.items():
        if key in selection and selection[key] != value:
            raise ValueError(
                f"{where}: field 'selection' has {key} = {selection[key]!r} but the blocks imply {value!r}"
            )
    layer = by_name.get("H64", {}).get("layer", 0)
    if isinstance(layer, int) and not isinstance(layer, bool) and layer >= len(doc["hidden_layers"]):
        raise ValueError(
            f"{where}: block H64 field 'layer' is {layer} but field 'hidden_layers' keeps "
            f"{len(doc['hidden_layers'])} layer(s)"
        )
