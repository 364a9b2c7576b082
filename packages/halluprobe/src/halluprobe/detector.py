"""A trained proxy detector: save, load (no pickle, no code), and predict on one triple.

On disk a detector is a folder with two files:

- ``detector.json``: format version, proxy, scored and hidden layers, the feature recipe (feature
  set, each block's config, ``C``, threshold, selections), package versions, and the SHA-256 of
- ``detector.safetensors``: every fitted array (block scalers, PCA components, RFE selection,
  final scaler, logistic weights).

[`Detector.load`][halluprobe.Detector.load] parses JSON and safetensors only, so loading never runs code from
the files, and it rejects another format version or a tensor file whose hash does not match.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from halluprobe.blocks import Standardizer, block_from_state

if TYPE_CHECKING:
    from flashstats_hf import ForwardStats

    from halluprobe.extract import ProxyExtractor
from halluprobe.cache import atomic_write_bytes, sha256_file
from halluprobe.protocol import ProbeFit

FORMAT_VERSION = 1
"""Version of the saved-detector format; [`Detector.load`][halluprobe.Detector.load] accepts only it."""

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
            "val_auroc": self.fit.val_auroc,
            "selection": self.fit.selection,
            "versions": _versions(),
            "tensors_sha256": digest,
        }
        atomic_write_bytes(path / _JSON, json.dumps(doc, indent=1).encode())
        return path

    @classmethod
    def load(cls, path: str | Path) -> Detector:
        """Read a detector saved by [`save`][halluprobe.Detector.save].

        Raises:
            FileNotFoundError: A file is missing.
            ValueError: Another format version, a tensor file that does not match its hash, or a
                malformed document.
        """
        from safetensors.numpy import load_file

        path = Path(path)
        doc = json.loads((path / _JSON).read_text())
        if not isinstance(doc, dict) or doc.get("format_version") != FORMAT_VERSION:
            got = doc.get("format_version") if isinstance(doc, dict) else None
            raise ValueError(
                f"{path / _JSON} has detector format version {got!r}; this halluprobe reads version "
                f"{FORMAT_VERSION}. Retrain the detector with this version."
            )
        if sha256_file(path / _TENSORS) != doc.get("tensors_sha256"):
            raise ValueError(f"{path / _TENSORS} does not match the hash in {_JSON}: the file was modified")
        tensors = load_file(str(path / _TENSORS))
        try:
            blocks = []
            for i, cfg in enumerate(doc["blocks"]):
                prefix = f"block{i}."
                arrays = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
                blocks.append(block_from_state(cfg, arrays))
            scaler = Standardizer()
            scaler.mean_, scaler.scale_ = tensors["scaler.mean"], tensors["scaler.scale"]
            fit = ProbeFit(
                feature_set=str(doc["feature_set"]), blocks=blocks, scaler=scaler, coef=tensors["coef"],
                intercept=float(doc["intercept"]), C=float(doc["C"]), threshold=float(doc["threshold"]),
                val_auroc=float(doc["val_auroc"]), selection=dict(doc.get("selection", {})),
            )  # fmt: skip
            return cls(fit, doc["proxy"], doc["layers"], doc["hidden_layers"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path} is not a valid halluprobe detector: {exc!r}") from exc

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
        logit = float(self.fit.decision_function([record])[0])
        token_logits = self.fit.decision_function(token_records(fs, 0, record))
        prob = 1.0 / (1.0 + np.exp(-logit))
        return Prediction(
            probability=prob,
            label=int(prob >= self.fit.threshold),
            threshold=self.fit.threshold,
            token_scores=1.0 / (1.0 + np.exp(-token_logits)),
            tokens=list(tokens),
        )


@dataclass
class _Triple:
    id: str
    context: str
    question: str
    answer: str
