"""Reading a saved detector safely: bounded regular files, one integrity hash, every field checked.

A detector's verdict depends on ``detector.json`` (threshold, intercept, block configs, layers,
proxy) as much as on ``detector.safetensors``; `document_digest` hashes both (the JSON in a
canonical form plus the tensor file's SHA-256), so an edit to either is refused on load. The hash
detects modification; it is not a signature (whoever can write the folder can recompute it).
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from halluprobe.detectors._detector_fields import (  # re-exported: the readers of a detector use them
    DETECTOR_FIELDS as DETECTOR_FIELDS,
    check_against_proxy as check_against_proxy,
    check_document as check_document,
    check_fields as check_fields,
    number,
)

if TYPE_CHECKING:
    from halluprobe.localisation._localisation import TokenProbe
    from halluprobe.training._protocol import ProbeFit

FORMAT_VERSION = 3
"""Version of the saved-detector format; ``Detector.load`` accepts only it.

Version 2: L9 stores its fixed feature names (version 1 stored a per-split RFE over the seven old logit
statistics, which records no longer hold). Version 3: ``detector.json`` carries an ``integrity`` hash of
all its fields, so any edit to the metadata is refused."""

MAX_JSON_BYTES = 16 << 20
"""Largest ``detector.json`` read (a real one is a few kilobytes)."""
MAX_TENSOR_BYTES = 2 << 30
"""Largest ``detector.safetensors`` read."""


def read_member(folder: Path, name: str, limit: int) -> bytes:
    """The bytes of ``folder/name``: a regular file (no link, FIFO or device) of at most ``limit`` bytes.

    Raises:
        FileNotFoundError: the folder or the file is missing.
        NotADirectoryError: ``folder`` is a file.
        ValueError: the member is a symlink, not a regular file, or too large.
    """
    if not folder.exists():
        raise FileNotFoundError(f"detector folder {folder} does not exist")
    if not folder.is_dir():
        raise NotADirectoryError(f"detector path {folder} is a file; expected the detector's folder")
    path = folder / name
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing: not a saved detector folder") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"{path} is a symbolic link; a detector's files must be regular files") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a folder with a bare errno
        os.close(fd)
        raise ValueError(f"{path} is not a regular file (a FIFO, device or folder)")
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if info.st_size > limit:
            raise ValueError(
                f"{path} has {info.st_size} bytes, more than the {limit} a detector file may have"
            )
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} grew past {limit} bytes while it was read")
    return data


def read_document(folder: Path, name: str) -> Any:
    """The parsed JSON of ``folder/name`` (`read_member`, at most `MAX_JSON_BYTES`).

    Needs only the standard library, so a command checks a detector path before torch loads.

    Raises:
        ValueError: naming the file, when it is not UTF-8 JSON, holds NaN or an infinity, or nests
            deeper than Python's parser goes; and the errors of `read_member`.
    """
    where = folder / name
    raw = read_member(folder, name, MAX_JSON_BYTES)
    try:
        return json.loads(raw, parse_constant=_no_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, _no_constant
        what = "nests too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ValueError(f"{where} is not a valid detector file: {what}") from None


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as an infinity
        raise ValueError(f"it holds the number {text}, too large for a float; every field must be finite")
    return value


def _no_constant(name: str) -> None:
    raise ValueError(f"it holds the non-finite number {name}; every field must be finite")


def document_digest(doc: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of ``doc`` without its ``integrity`` field (which stores this value).

    ``doc`` carries ``tensors_sha256``, so the digest covers the tensor file too.
    """
    body = {k: v for k, v in doc.items() if k != "integrity"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def check_format(doc: Any, where: str, version: int = FORMAT_VERSION) -> None:
    """The document is a JSON object of the detector format ``version``, or a ValueError naming ``where``."""
    got = doc.get("format_version") if isinstance(doc, dict) else None
    if got != version:
        raise ValueError(
            f"{where} has detector format version {got!r}; this halluprobe reads version {version}. "
            "Retrain the detector with this version."
        )


def _expect(name: str, arr: np.ndarray, shape: tuple[int, ...], where: str) -> None:
    if arr.shape != shape:
        raise ValueError(
            f"{where}: tensor {name!r} has shape {arr.shape}; the detector's metadata promise {shape}"
        )


def block_width(name: str, config: dict, arrays: dict[str, np.ndarray], where: str) -> int:
    """Checks one block's arrays (finite, consistent shapes); returns its number of output features."""
    for key, arr in arrays.items():
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise ValueError(f"{where}: tensor 'block.{key}' of block {name} has non-finite values")
    if name in ("A7", "L9"):  # a fixed selection in the config, nothing fitted
        if arrays:
            raise ValueError(f"{where}: block {name} fits nothing, yet tensors {sorted(arrays)} are stored")
        return len(config.get("features", ()))
    if name in ("G", "C"):  # standardised grounding or contrast features, nothing projected
        width = len(config.get("features", ()))
        for key in ("mean", "scale"):
            if key not in arrays:
                raise ValueError(f"{where}: block {name} lacks tensor {key!r}")
            _expect(f"{name}.{key}", arrays[key], (width,), where)
        if (arrays["scale"] <= 0).any():
            raise ValueError(f"{where}: block {name} has a zero or negative scale (a division by zero)")
        return width
    missing = {"mean", "scale", "center", "components"} - set(arrays)
    if missing:
        raise ValueError(f"{where}: block {name} lacks tensors {sorted(missing)}")
    comp = arrays["components"]
    if comp.ndim != 2 or comp.shape[0] < 1:
        raise ValueError(f"{where}: block {name} 'components' must be [n_components, d], got {comp.shape}")
    d = comp.shape[1]
    for key in ("mean", "scale", "center"):
        _expect(f"{name}.{key}", arrays[key], (d,), where)
    if (arrays["scale"] <= 0).any():
        raise ValueError(f"{where}: block {name} has a zero or negative scale (a division by zero)")
    if comp.shape[0] > config["components"]:
        raise ValueError(
            f"{where}: block {name} 'components' has {comp.shape[0]} rows, more than its config's "
            f"components = {config['components']}"
        )
    per_head = config["k"] if name == "A64" else 2  # A64: k sink values per head; H64: mean and std
    if d % per_head:
        raise ValueError(f"{where}: block {name} has {d} raw features, not a multiple of {per_head}")
    return int(comp.shape[0])


def check_final(tensors: dict[str, np.ndarray], width: int, where: str) -> None:
    """Checks the final scaler and the weights against the blocks' total ``width``."""
    for key in ("scaler.mean", "scaler.scale", "coef"):
        if key not in tensors:
            raise ValueError(f"{where}: tensor {key!r} is missing")
        arr = tensors[key]
        if arr.dtype.kind != "f" or not np.isfinite(arr).all():
            raise ValueError(f"{where}: tensor {key!r} must hold finite floats")
        _expect(key, arr, (width,), where)
    if (tensors["scaler.scale"] <= 0).any():
        raise ValueError(f"{where}: tensor 'scaler.scale' has zero or negative entries (a division by zero)")


def versions() -> dict[str, str]:
    """Installed versions of the packages a saved detector depends on (``"absent"`` when missing)."""
    out = {}
    for pkg in ("halluprobe", "flashstats-hf", "flashstats-kernels", "torch", "transformers", "scikit-learn"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "absent"
    return out


def token_probe_from(meta: Any, tensors: dict[str, np.ndarray], where: str) -> TokenProbe | None:
    """The saved token probe (None when the detector has none), every field and array checked."""
    if meta is None:
        return None
    from halluprobe.features._token_data import TOKEN_VIEWS
    from halluprobe.localisation._localisation import TokenProbe

    keys = ("intercept", "C", "threshold", "val_auroc")
    if not isinstance(meta, dict):
        raise ValueError(f"{where}: field 'token_probe' must be an object with numbers {keys}")
    for key in keys:
        number(meta, key, where, field=f"token_probe.{key}")
    try:
        mean, scale, coef = (tensors[f"token.{k}"] for k in ("mean", "scale", "coef"))
    except KeyError as exc:
        raise ValueError(f"{where}: the token probe's tensor {exc} is missing") from None
    if not (mean.ndim == 1 and mean.shape == scale.shape == coef.shape):
        raise ValueError(
            f"{where}: token probe tensors must be [F] each, got {mean.shape}, {scale.shape}, {coef.shape}"
        )
    if not all(np.isfinite(a).all() for a in (mean, scale, coef)) or not np.all(scale > 0):
        raise ValueError(f"{where}: the token probe's tensors must be finite with a positive scale")
    intercept, c, threshold = (float(meta[k]) for k in keys[:3])
    decoding = {k: meta.get(k, 0) for k in ("window", "smooth", "gap")}  # absent: saved before they existed
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 64 for v in decoding.values()):
        raise ValueError(f"{where}: token probe window/smooth/gap must be integers in 0..64, got {decoding}")
    view = meta.get("view", "mean")  # absent: saved before views existed (the head-mean features)
    if view not in TOKEN_VIEWS:
        raise ValueError(f"{where}: token probe view must be one of {TOKEN_VIEWS}, got {view!r}")
    return TokenProbe(
        mean, scale, coef, intercept, c, threshold, float(meta["val_auroc"]), **decoding, view=view
    )


def probe_from(doc: dict[str, Any], tensors: dict[str, np.ndarray], doc_where: str, where: str) -> ProbeFit:
    """The `ProbeFit` of a checked document (``doc_where``) and its tensors (``where``), arrays checked."""
    from halluprobe.blocks._blocks import scaler_from_arrays
    from halluprobe.blocks._state import block_from_state
    from halluprobe.training._protocol import ProbeFit

    blocks, width = [], 0
    for i, cfg in enumerate(doc["blocks"]):
        prefix = f"block{i}."
        arrays = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        try:
            block = block_from_state(cfg, arrays)
        except (KeyError, TypeError, ValueError) as exc:
            detail = f"lacks {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"{doc_where}: field 'blocks[{i}]' ({cfg.get('name')!r}): {detail}") from None
        width += block_width(block.name, block.config, block.arrays, where)
        blocks.append(block)
    check_final(tensors, width, where)
    scaler = scaler_from_arrays(tensors["scaler.mean"], tensors["scaler.scale"])
    return ProbeFit(
        feature_set=doc["feature_set"], blocks=blocks, scaler=scaler, coef=tensors["coef"],
        intercept=float(doc["intercept"]), C=float(doc["C"]), threshold=float(doc["threshold"]),
        val_auroc=float("nan") if doc["val_auroc"] is None else float(doc["val_auroc"]),
        selection=dict(doc.get("selection", {})),
    )  # fmt: skip


def write_folder(
    path: Path,
    probe: ProbeFit,
    tp: TokenProbe | None,
    meta: dict[str, Any],
    json_name: str,
    tensors_name: str,
) -> Path:
    """Write a detector's two files (atomically): its arrays, then ``meta`` with the recipe and hashes."""
    from halubench_data.files import atomic_path, atomic_write_bytes
    from safetensors.numpy import save_file

    from halluprobe.features._cache import sha256_file

    path.mkdir(parents=True, exist_ok=True)
    tensors = {"scaler.mean": probe.scaler.mean_, "scaler.scale": probe.scaler.scale_, "coef": probe.coef}
    configs = []
    for i, block in enumerate(probe.blocks):
        config, arrays = block.state()
        configs.append(config)
        tensors.update({f"block{i}.{k}": v for k, v in arrays.items()})
    if tp is not None:
        tensors.update({"token.mean": tp.mean, "token.scale": tp.scale, "token.coef": tp.coef})
    with atomic_path(path / tensors_name) as tmp:
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp))
        digest = sha256_file(tmp)
    doc = {
        **meta,
        "feature_set": probe.feature_set, "blocks": configs, "intercept": probe.intercept, "C": probe.C,
        "threshold": probe.threshold,
        "val_auroc": probe.val_auroc if np.isfinite(probe.val_auroc) else None,
        "selection": probe.selection,
        "versions": versions(),
        "tensors_sha256": digest,
        "token_probe": None
        if tp is None
        else {
            **{k: float(getattr(tp, k)) for k in ("intercept", "C", "threshold", "val_auroc")},
            **{k: int(getattr(tp, k)) for k in ("window", "smooth", "gap")},
            "view": tp.view,
        },
    }  # fmt: skip
    doc["integrity"] = document_digest(doc)
    atomic_write_bytes(path / json_name, json.dumps(doc, indent=1, allow_nan=False).encode())
    return path
