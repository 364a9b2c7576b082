"""A reader on disk: the detector folder format, with ``"kind": "reader"``.

- ``detector.json``: format version, kind, proxy id, the adapters' shape (rank, alpha, targets),
  pooling, anchor, calibration, threshold and its rule, span decoding, the card (proxy name, digest,
  layers and width; sources; training steps and throughput; settings; validation metrics; versions),
  the SHA-256 of the tensor file and ``integrity``, the SHA-256 of all of the above.
- ``detector.safetensors``: the adapters (``<module>.lora_A: [r, in]``, ``<module>.lora_B: [out, r]``,
  float16) and the token head (``head.proj.weight: [1, Dm]``, ``head.proj.bias: [1]``).

Loading parses JSON and safetensors only (no code runs from the files), refuses any edit to either
file, and checks every field: ranges, the adapters' names and shapes against their rank and targets,
the head against the proxy's width, finite values. The adapters are checked against the proxy's own
layers when it loads (`halluprobe.reader._model.merged_proxy`).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from halluprobe.reader._scoring import Anchor, ReaderScoring
from halluprobe.reader._settings import POOLS, AdapterSpec

__all__ = ["KIND", "READER_FORMAT", "check_document", "load_reader", "save_reader"]

KIND = "reader"
"""``detector.json``'s ``kind`` for a fine-tuned reader (a probe detector has none)."""
READER_FORMAT = 1
"""Version of the reader's folder format."""
_JSON, _TENSORS = "detector.json", "detector.safetensors"


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def save_reader(est, path: Path) -> Path:
    """Write ``est``'s two files (atomically): the tensors, then the document with both hashes."""
    from halubench_data.files import atomic_path, atomic_write_bytes
    from safetensors.torch import save_file

    from halluprobe.detectors._detector_file import document_digest
    from halluprobe.features._cache import sha256_file

    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.contiguous() for k, v in est.adapter_.items()}
    tensors.update({f"head.{k}": v.float().contiguous() for k, v in est.head_.items()})
    with atomic_path(path / _TENSORS) as tmp:
        save_file(tensors, str(tmp))
        digest = sha256_file(tmp)
    s: ReaderScoring = est.scoring_
    doc = {
        "format_version": READER_FORMAT,
        "kind": KIND,
        "proxy": est.proxy,
        "adapter": {"rank": est.spec_.rank, "alpha": est.spec_.alpha, "targets": list(est.spec_.targets)},
        "pool": s.pool,
        "anchor": None
        if s.anchor is None
        else {"weight": s.anchor.weight, "overlap": list(s.anchor.overlap), "reader": list(s.anchor.reader)},
        "calibration": list(s.calibration),
        "threshold": s.threshold,
        "threshold_rule": s.threshold_rule,
        "spans": {"threshold": s.span_threshold, "gap": s.span_gap},
        "validation": _finite(est.validation_),
        "card": _finite(est.card_),
        "tensors_sha256": digest,
    }
    doc["integrity"] = document_digest(doc)
    atomic_write_bytes(path / _JSON, json.dumps(doc, indent=1, allow_nan=False).encode())
    return path


def _field(doc: dict, key: str, where: str, check, what: str) -> Any:
    value = doc.get(key)
    try:
        ok = bool(check(value))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{where}: field {key!r} must be {what}, got {value!r:.80}")
    return value


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _pair(x: Any, positive_second: bool = False) -> bool:
    return (
        isinstance(x, list) and len(x) == 2 and all(_num(v) for v in x) and (not positive_second or x[1] > 0)
    )


def _scoring(doc: dict, where: str) -> ReaderScoring:
    pool = _field(doc, "pool", where, lambda v: v in POOLS, f"one of {POOLS}")
    cal = _field(doc, "calibration", where, _pair, "[a, b] (finite numbers)")
    thr = _field(doc, "threshold", where, lambda v: _num(v) and 0 <= v <= 1, "a probability in [0, 1]")
    rule = _field(doc, "threshold_rule", where, lambda v: isinstance(v, str) and v, "the rule's name")
    spans = _field(doc, "spans", where, lambda v: isinstance(v, dict) and _num(v.get("threshold"))
                   and isinstance(v.get("gap"), int) and 0 <= v["gap"] <= 64,
                   "{'threshold': a number, 'gap': an integer in [0, 64]}")  # fmt: skip
    anchor = doc.get("anchor")
    if anchor is not None:
        _field(doc, "anchor", where, lambda a: isinstance(a, dict) and _num(a.get("weight"))
               and 0 <= a["weight"] <= 1 and _pair(a.get("overlap"), True) and _pair(a.get("reader"), True),
               "null or {'weight': in [0, 1], 'overlap': [mean, sd], 'reader': [mean, sd]}")  # fmt: skip
        o, r = anchor["overlap"], anchor["reader"]
        anchor = Anchor(float(anchor["weight"]), (float(o[0]), float(o[1])), (float(r[0]), float(r[1])))
    return ReaderScoring(pool, (float(cal[0]), float(cal[1])), float(thr), rule, float(spans["threshold"]),
                         int(spans["gap"]), anchor)  # fmt: skip


def _spec(doc: dict, where: str) -> AdapterSpec:
    adapter = _field(doc, "adapter", where, lambda v: isinstance(v, dict), "{'rank', 'alpha', 'targets'}")
    spec = AdapterSpec(adapter.get("rank"), adapter.get("alpha"), tuple(adapter.get("targets") or ()))
    try:
        spec.check()
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return spec


def _check_tensors(tensors: dict, spec: AdapterSpec, width: int, where: str) -> None:
    """Names and shapes the document promises: adapters of ``spec``, a head of ``width``."""
    import torch

    head = {"head.proj.weight": (1, width), "head.proj.bias": (1,)}
    for name, shape in head.items():
        if name not in tensors or tuple(tensors[name].shape) != shape:
            got = None if name not in tensors else tuple(tensors[name].shape)
            raise ValueError(f"{where}: tensor {name!r} must have shape {shape}, got {got}")
    adapters = [k for k in tensors if k not in head]
    if not adapters:
        raise ValueError(f"{where}: no adapter tensor")
    for name in adapters:
        module, _, kind = name.rpartition(".")
        t = tensors[name]
        ok = (
            module.rsplit(".", 1)[-1] in spec.targets
            and t.ndim == 2
            and (
                (kind == "lora_A" and t.shape[0] == spec.rank)
                or (kind == "lora_B" and t.shape[1] == spec.rank)
            )
        )
        if not ok:
            raise ValueError(
                f"{where}: tensor {name!r} of shape {tuple(t.shape)} is not a rank-{spec.rank} adapter of "
                f"the targets {list(spec.targets)}"
            )
        partner = f"{module}.{'lora_B' if kind == 'lora_A' else 'lora_A'}"
        if partner not in tensors:
            raise ValueError(f"{where}: adapter {module!r} has {kind} but no {partner.rsplit('.', 1)[-1]}")
    bad = [k for k, v in tensors.items() if not bool(torch.isfinite(v.float()).all())]
    if bad:
        raise ValueError(f"{where}: tensor {bad[0]!r} holds non-finite values")


def check_document(doc: Any, where: str) -> tuple[AdapterSpec, ReaderScoring, dict]:
    """Every field of a reader's ``detector.json`` (no tensor, no torch): its spec, scoring and card.

    Raises:
        ValueError: naming ``where`` and the field: another kind or format version, or a field of the
            wrong type or range.
    """
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise ValueError(
            f'{where} is not a fine-tuned reader (no "kind": "reader"); load it with halluprobe.load'
        )
    if doc.get("format_version") != READER_FORMAT:
        raise ValueError(
            f"{where} has reader format version {doc.get('format_version')!r}; this halluprobe reads "
            f"version {READER_FORMAT}. Fine-tune it again with this version."
        )
    spec = _spec(doc, where)
    scoring = _scoring(doc, where)
    _field(doc, "proxy", where, lambda v: v is None or (isinstance(v, str) and v), "null or a proxy id")
    card = _field(doc, "card", where, lambda v: isinstance(v, dict) and isinstance(v.get("proxy"), dict)
                  and isinstance(v["proxy"].get("width"), int) and isinstance(v["proxy"].get("layers"), int)
                  and v["proxy"]["width"] > 0 and v["proxy"]["layers"] > 0,
                  "a card with proxy {'width', 'layers'} (positive integers)")  # fmt: skip
    _field(doc, "validation", where, lambda v: isinstance(v, dict), "a mapping of metrics")
    return spec, scoring, card


def load_reader(cls, path: Path):
    """[`Reader.load`][halluprobe.Reader.load]."""
    from safetensors import SafetensorError
    from safetensors.torch import load as load_tensors

    from halluprobe.detectors._detector_file import (
        MAX_TENSOR_BYTES,
        document_digest,
        read_document,
        read_member,
    )

    where = str(path / _JSON)
    doc = read_document(path, _JSON)
    spec, scoring, card = check_document(doc, where)
    if doc.get("integrity") != document_digest(doc):
        raise ValueError(f"{where} does not match its integrity hash: the reader's metadata was modified")
    raw = read_member(path, _TENSORS, MAX_TENSOR_BYTES)
    if hashlib.sha256(raw).hexdigest() != doc.get("tensors_sha256"):
        raise ValueError(f"{path / _TENSORS} does not match the hash in {_JSON}: the file was modified")
    try:
        tensors = load_tensors(raw)
    except SafetensorError as exc:
        raise ValueError(f"{path / _TENSORS} is not a safetensors file: {exc}") from None
    _check_tensors(tensors, spec, int(card["proxy"]["width"]), str(path / _TENSORS))
    est = cls(doc["proxy"], rank=spec.rank, alpha=spec.alpha, anchor=scoring.anchor is not None,
              threshold_rule=scoring.threshold_rule, **_settings_params(card))  # fmt: skip
    est.spec_, est.scoring_, est.card_ = spec, scoring, card
    est.validation_ = {k: (float("nan") if v is None else v) for k, v in doc["validation"].items()}
    est.adapter_ = {k: v for k, v in tensors.items() if not k.startswith("head.")}
    est.head_ = {k.removeprefix("head."): v for k, v in tensors.items() if k.startswith("head.")}
    est.classes_ = np.array([0, 1])
    est.source = path
    return est


def _settings_params(card: dict) -> dict:
    """The estimator parameters recorded in the card's settings (the rest keep their defaults)."""
    given = card.get("settings")
    settings: dict = given if isinstance(given, dict) else {}
    keys = ("dropout", "learning_rate", "head_learning_rate", "epochs", "max_batch_tokens", "token_weight",
            "evals_per_epoch", "patience", "seed")  # fmt: skip
    out = {k: settings[k] for k in keys if _num(settings.get(k))}
    if settings.get("pool") in POOLS:
        out["pool"] = settings["pool"]
    return out
