"""A trained proxy detector: save, load (no pickle, no code), and predict on one triple.

On disk a detector is a folder with two files:

- ``detector.json``: format version, proxy, scored and hidden layers, the feature recipe (feature
  set, each block's config, ``C``, threshold, selections), package versions, the SHA-256 of the
  tensor file, and ``integrity``: the SHA-256 of all of the above (see
  `halluprobe.detector_file.document_digest`).
- ``detector.safetensors``: every fitted array (block scalers, PCA components, RFE selection,
  final scaler, logistic weights).

[`Detector.load`][halluprobe.Detector.load] parses JSON and safetensors only, so loading never runs code
from the files. It opens only regular files of bounded size (no links, FIFOs or devices), and rejects
another format version, any edit to either file, a field of the wrong type or range, and any
non-finite array or array whose shape the metadata does not promise.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from halluprobe import detector_file as dfile
from halluprobe.blocks import Standardizer, block_from_state
from halluprobe.cache import atomic_write_bytes, sha256_file
from halluprobe.protocol import ProbeFit

if TYPE_CHECKING:
    from flashstats_hf import ForwardStats

    from halluprobe.extract import ProxyExtractor

FORMAT_VERSION = 3
"""Version of the saved-detector format; [`Detector.load`][halluprobe.Detector.load] accepts only it.

Version 2 (issue 16): L9 stores its fixed feature names (version 1 stored a per-split RFE over the
seven old logit statistics, which records no longer hold). Version 3 (issue 21): ``detector.json``
carries an ``integrity`` hash of all its fields, so any edit to the metadata is refused."""

_JSON, _TENSORS = "detector.json", "detector.safetensors"


@dataclass
class Prediction:
    """What [`Detector.predict`][halluprobe.Detector.predict] returns for one (context, question, answer)."""

    probability: float
    """Probability that the answer is hallucinated (higher = more likely hallucinated)."""
    label: int
    """1 (hallucinated) when ``probability >= threshold``, else 0."""
    threshold: float
    """The detector's validation-F1 threshold."""
    token_scores: np.ndarray
    """``[A] float64``: per-answer-token probabilities; their logits average to the answer's logit."""
    tokens: list[str]
    """The ``A`` answer tokens as text."""


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("halluprobe", "flashstats-hf", "flashstats-kernels", "torch", "transformers", "scikit-learn"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "absent"
    return out


class Detector:
    """A fitted feature-set probe bound to its proxy and extraction settings.

    Args:
        fit: The fitted probe ([`halluprobe.protocol.fit_blocks`][halluprobe.fit_blocks]).
        proxy: Proxy id for [`flashstats_hf.load_model`][] (``None``: the default SmolLM2).
        layers: Scored layers (``None``: all).
        hidden_layers: Kept hidden layers (as in the extraction).
    """

    def __init__(
        self, fit: ProbeFit, proxy: str | None, layers: Sequence[int] | None, hidden_layers: Sequence[int]
    ):
        self.fit = fit
        self.proxy = proxy
        self.layers = None if layers is None else tuple(int(i) for i in layers)
        self.hidden_layers = tuple(int(i) for i in hidden_layers)
        self.source: Path | None = None
        """The folder this detector was loaded from (None when built in memory)."""
        self._extractor: ProxyExtractor | None = None

    def save(self, path: str | Path) -> Path:
        """Write ``path/detector.json`` and ``path/detector.safetensors`` (atomically); returns ``path``."""
        from safetensors.numpy import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tensors: dict[str, np.ndarray] = {
            "scaler.mean": self.fit.scaler.mean_,
            "scaler.scale": self.fit.scaler.scale_,
            "coef": self.fit.coef,
        }
        configs = []
        for i, block in enumerate(self.fit.blocks):
            config, arrays = block.state()
            configs.append(config)
            tensors.update({f"block{i}.{k}": v for k, v in arrays.items()})
        fd, tmp = tempfile.mkstemp(dir=path, prefix=f".{_TENSORS}.", suffix=".tmp")
        os.close(fd)
        try:
            save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, tmp)
            digest = sha256_file(Path(tmp))
            os.replace(tmp, path / _TENSORS)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        doc = {
            "format_version": FORMAT_VERSION,
            "proxy": self.proxy,
            "layers": list(self.layers) if self.layers is not None else None,
            "hidden_layers": list(self.hidden_layers),
            "feature_set": self.fit.feature_set,
            "blocks": configs,
            "intercept": self.fit.intercept,
            "C": self.fit.C,
            "threshold": self.fit.threshold,
            "val_auroc": self.fit.val_auroc if np.isfinite(self.fit.val_auroc) else None,
            "selection": self.fit.selection,
            "versions": _versions(),
            "tensors_sha256": digest,
        }
        doc["integrity"] = dfile.document_digest(doc)
        atomic_write_bytes(path / _JSON, json.dumps(doc, indent=1, allow_nan=False).encode())
        return path

    @classmethod
    def load(cls, path: str | Path) -> Detector:
        """Read a detector saved by [`save`][halluprobe.Detector.save], checking all its verdict depends on.

        Raises:
            FileNotFoundError: The folder or a file is missing.
            NotADirectoryError: ``path`` is a file.
            ValueError: Another format version, a file that does not match the integrity hash, a file
                that is a link, FIFO or device or too large, or a malformed field or array (each named).
        """
        from safetensors import SafetensorError
        from safetensors.numpy import load as load_tensors

        path = Path(path)
        where = str(path / _JSON)
        try:
            doc = json.loads(
                dfile.read_member(path, _JSON, dfile.MAX_JSON_BYTES), parse_constant=_no_constant
            )
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{where} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format_version") != FORMAT_VERSION:
            got = doc.get("format_version") if isinstance(doc, dict) else None
            raise ValueError(
                f"{where} has detector format version {got!r}; this halluprobe reads version "
                f"{FORMAT_VERSION}. Retrain the detector with this version."
            )
        if doc.get("integrity") != dfile.document_digest(doc):
            raise ValueError(
                f"{where} does not match its integrity hash: the detector's metadata was modified"
            )
        raw = dfile.read_member(path, _TENSORS, dfile.MAX_TENSOR_BYTES)
        if hashlib.sha256(raw).hexdigest() != doc.get("tensors_sha256"):
            raise ValueError(f"{path / _TENSORS} does not match the hash in {_JSON}: the file was modified")
        dfile.check_document(doc, where)
        try:
            tensors = load_tensors(raw)
        except SafetensorError as exc:
            raise ValueError(f"{path / _TENSORS} is not a safetensors file: {exc}") from None
        fit = _fit_from(doc, tensors, str(path / _TENSORS))
        det = cls(fit, doc["proxy"], doc["layers"], doc["hidden_layers"])
        det.source = path
        return det

    def score_records(self, records: list, *, logits: bool = False) -> np.ndarray:
        """``[n]`` probabilities (or logits) of ``records``; higher = more likely hallucinated.

        Raises:
            ValueError: the records do not fit the detector (naming the detector and the expected shape).
            FloatingPointError: a score is not finite (non-finite features); never a silent verdict.
        """
        try:
            out = self.fit.decision_function(records)
        except ValueError as exc:
            raise ValueError(f"detector {self.source or self.fit.feature_set}: {exc}") from None
        if not np.isfinite(out).all():
            raise FloatingPointError(
                f"detector {self.source or self.fit.feature_set}: {int((~np.isfinite(out)).sum())} score(s) "
                "are not finite (the proxy produced non-finite features); refusing to give a verdict"
            )
        return out if logits else 1.0 / (1.0 + np.exp(-out))

    def info(self) -> dict[str, Any]:
        """Feature set, threshold and selections, for display."""
        return {"feature_set": self.fit.feature_set, "threshold": self.fit.threshold, **self.fit.selection}

    def extractor(self, device: str | None = None):
        """The proxy extractor (loads the proxy on first use)."""
        if self._extractor is None:
            from flashstats_hf import load_model

            from halluprobe.extract import ProxyExtractor

            model, tok = load_model(self.proxy, device=device)
            self._extractor = ProxyExtractor(model, tok, self.layers, self.hidden_layers)
        return self._extractor

    def predict(self, context: str, question: str, answer: str, *, device: str | None = None) -> Prediction:
        """Score one triple with the proxy (higher = more likely hallucinated).

        Returns:
            A [`Prediction`][halluprobe.Prediction].
        """
        ext = self.extractor(device)
        ids, start = ext.encode(_Triple("query", context, question, answer))
        fs = ext.forward([(ids, start)])
        return self.score_stats(fs, [ext.tokenizer.decode([t]) for t in ids[start:]])

    def score_stats(self, fs: ForwardStats, tokens: list[str]) -> Prediction:
        """Score the statistics of one answer (batch of 1) from any recording path.

        [`predict`][halluprobe.Detector.predict] reads them from one teacher-forced forward; the
        streaming scorer ([`halluprobe.StreamingScorer`][]) from a
        [`flashstats_hf.CachedRecorder`][] after each chunk. Equal statistics give equal predictions.

        Args:
            fs: A [`flashstats_hf.ForwardStats`][] of one example, recorded with this detector's
                layers, hidden layers, logits and the default request.
            tokens: The answer tokens as text (for display).

        Returns:
            A [`Prediction`][halluprobe.Prediction] (higher = more likely hallucinated).
        """
        from halluprobe.records import reduce_forward, token_records

        (record,) = reduce_forward(fs, ["query"])
        logit = float(self.score_records([record], logits=True)[0])
        token_logits = self.score_records(token_records(fs, 0, record), logits=True)
        prob = 1.0 / (1.0 + np.exp(-logit))
        return Prediction(
            probability=prob,
            label=int(prob >= self.fit.threshold),
            threshold=self.fit.threshold,
            token_scores=1.0 / (1.0 + np.exp(-token_logits)),
            tokens=list(tokens),
        )


def _no_constant(name: str) -> None:
    raise ValueError(f"a detector file holds the non-finite number {name}; every field must be finite")


def _fit_from(doc: dict[str, Any], tensors: dict[str, np.ndarray], where: str) -> ProbeFit:
    """The `ProbeFit` of a checked document and its tensors (every array checked)."""
    blocks, width = [], 0
    for i, cfg in enumerate(doc["blocks"]):
        prefix = f"block{i}."
        arrays = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        try:
            block = block_from_state(cfg, arrays)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{where}: block {i} ({cfg.get('name')!r}) is malformed: {exc!r}") from None
        width += dfile.block_width(block.name, block.config, block.arrays, where)
        blocks.append(block)
    dfile.check_final(tensors, width, where)
    scaler = Standardizer()
    scaler.mean_, scaler.scale_ = tensors["scaler.mean"], tensors["scaler.scale"]
    return ProbeFit(
        feature_set=doc["feature_set"], blocks=blocks, scaler=scaler, coef=tensors["coef"],
        intercept=float(doc["intercept"]), C=float(doc["C"]), threshold=float(doc["threshold"]),
        val_auroc=float("nan") if doc["val_auroc"] is None else float(doc["val_auroc"]),
        selection=dict(doc.get("selection", {})),
    )  # fmt: skip


@dataclass
class _Triple:
    id: str
    context: str
    question: str
    answer: str
