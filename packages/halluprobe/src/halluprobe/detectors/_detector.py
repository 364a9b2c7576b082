"""A trained proxy detector: save, load (no pickle, no code), and predict on one triple.

On disk a detector is a folder with two files:

- ``detector.json``: format version, proxy, scored and hidden layers, the feature recipe (feature
  set, each block's config, ``C``, threshold, selections), package versions, the SHA-256 of the
  tensor file, and ``integrity``: the SHA-256 of all of the above (see
  `halluprobe.detectors._detector_file.document_digest`).
- ``detector.safetensors``: every fitted array (block scalers, PCA components, RFE selection,
  final scaler, logistic weights).

[`Detector.load`][halluprobe.Detector.load] parses JSON and safetensors only, so loading never runs code
from the files. It opens only regular files of bounded size (no links, FIFOs or devices), and rejects
another format version, any edit to either file, a field of the wrong type or range, fields that
contradict each other (blocks and feature set, K and k and the blocks), and any non-finite array or
array whose shape the metadata does not promise.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from halubench_data.files import atomic_path, atomic_write_bytes

from halluprobe._numeric import sigmoid
from halluprobe.blocks._blocks import Standardizer, block_from_state
from halluprobe.detectors import _detector_file as dfile
from halluprobe.features._cache import sha256_file
from halluprobe.features._token_data import TOKEN_VIEWS
from halluprobe.localisation._localisation import TokenProbe
from halluprobe.localisation._verdict_spans import PredictedSpan
from halluprobe.training._protocol import ProbeFit

if TYPE_CHECKING:
    from flashstats_hf import ForwardStats

    from halluprobe.features._extract import ProxyExtractor
    from halluprobe.features._records import ExampleRecord

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
    spans: tuple[PredictedSpan, ...] = ()
    """Character spans of the answer predicted hallucinated, each with a ``confidence`` in ``[0, 1]``; empty
    when ``label`` is 0 (spans agree with the verdict). From the detector's token probe when it has one
    (tokens whose token-probe score reaches its span threshold), else the tokens whose ``token_scores``
    reach ``threshold`` (`halluprobe.localisation.decode_spans`); for a hallucinated answer where no
    token does, the characters the context does not support (text only). Confidences and the fallback:
    `halluprobe.localisation`. Empty from [`score_stats`][halluprobe.Detector.score_stats], which has
    no token offsets."""


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
        fit: The fitted probe ([`halluprobe.training.fit_blocks`][halluprobe.fit_blocks]).
        proxy: Proxy id for [`flashstats_hf.load_model`][] (``None``: the default SmolLM2).
        layers: Scored layers (``None``: all).
        hidden_layers: Kept hidden layers (as in the extraction).
        token_probe: A token probe for spans (`halluprobe.localisation.TokenProbe`), saved with it.
    """

    def __init__(
        self,
        fit: ProbeFit,
        proxy: str | None,
        layers: Sequence[int] | None,
        hidden_layers: Sequence[int],
        token_probe: TokenProbe | None = None,
    ):
        self.fit = fit
        self.token_probe = token_probe
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
        tp = self.token_probe
        if tp is not None:
            tensors.update({"token.mean": tp.mean, "token.scale": tp.scale, "token.coef": tp.coef})
        with atomic_path(path / _TENSORS) as tmp:
            save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp))
            digest = sha256_file(tmp)
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
            "token_probe": None
            if tp is None
            else {
                **{k: float(getattr(tp, k)) for k in ("intercept", "C", "threshold", "val_auroc")},
                **{k: int(getattr(tp, k)) for k in ("window", "smooth", "gap")},
                "view": tp.view,
            },
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
        doc = dfile.read_document(path, _JSON)
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
        fit = _fit_from(doc, tensors, where, str(path / _TENSORS))
        token_probe = _token_probe_from(doc.get("token_probe"), tensors, str(path / _TENSORS))
        det = cls(fit, doc["proxy"], doc["layers"], doc["hidden_layers"], token_probe)
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
        return out if logits else sigmoid(out)

    def info(self) -> dict[str, Any]:
        """Feature set, threshold and selections, for display."""
        return {"feature_set": self.fit.feature_set, "threshold": self.fit.threshold, **self.fit.selection}

    def extractor(self, device: str | None = None):
        """The proxy extractor (loads the proxy on first use); it computes only what this detector reads."""
        if self._extractor is None:
            from flashstats_hf import load_model

            from halluprobe.features._extract import ProxyExtractor
            from halluprobe.features._reads import detector_reads

            model, tok = load_model(self.proxy, device=device)
            ext = ProxyExtractor(model, tok, self.layers, self.hidden_layers)
            cfg = model.config
            ext.reads = detector_reads(self, int(cfg.num_hidden_layers), int(cfg.num_attention_heads))
            self._extractor = ext
        return self._extractor

    def predict(self, context: str, question: str, answer: str, *, device: str | None = None) -> Prediction:
        """Score one triple with the proxy (higher = more likely hallucinated).

        Returns:
            A [`Prediction`][halluprobe.Prediction], with the answer's predicted spans.
        """
        return self.predict_batch([(context, question, answer)], device=device)[0]

    def predict_batch(
        self, triples: Sequence[tuple[str, str, str]], *, device: str | None = None, batch_size: int = 8
    ) -> list[Prediction]:
        """Score many ``(context, question, answer)`` triples with one loaded proxy, in batched forwards.

        Triples are grouped by length into forwards of at most ``batch_size``; the predictions come
        back in input order and match [`predict`][halluprobe.Detector.predict] on each triple up to
        padding round-off.

        Raises:
            ValueError: when a triple is not three strings or an answer is empty, or ``batch_size < 1``.
        """
        from halluprobe.features._extract import plan_batches
        from halluprobe.features._records import reduce_forward

        items = [_Triple(f"item{i}", *_check_triple(i, t)) for i, t in enumerate(triples)]
        ext = self.extractor(device)
        encoded = [ext.encode(it) for it in items]
        out: list[Prediction | None] = [None] * len(items)
        for idx in plan_batches([len(ids) for ids, _ in encoded], batch_size=batch_size):
            fs = ext.forward([encoded[i] for i in idx])
            records = self._grounded(reduce_forward(fs, [items[i].id for i in idx]), [items[i] for i in idx])
            for b, (i, record) in enumerate(zip(idx, records, strict=True)):
                it = items[i]
                out[i] = self._prediction(
                    ext, fs, b, record, encoded[i], (it.context, it.question, it.answer)
                )
        return [p for p in out if p is not None]

    def score_stats(
        self, fs: ForwardStats, tokens: list[str], text: tuple[str, str, str] | None = None
    ) -> Prediction:
        """Score the statistics of one answer (batch of 1) from any recording path.

        [`predict`][halluprobe.Detector.predict] reads them from one teacher-forced forward; the
        streaming scorer ([`halluprobe.StreamingScorer`][]) from a
        [`flashstats_hf.CachedRecorder`][] after each chunk. Equal statistics (and text) give equal
        predictions (without token offsets there are no character spans).

        Args:
            fs: A [`flashstats_hf.ForwardStats`][] of one example, recorded with this detector's
                layers, hidden layers, logits and the default request.
            tokens: The answer tokens as text (for display).
            text: ``(context, question, answer)`` of the statistics: needed by a detector with a
                grounding block ``G`` (`uses_grounding`), ignored otherwise.

        Returns:
            A [`Prediction`][halluprobe.Prediction] (higher = more likely hallucinated).

        Raises:
            ValueError: the detector reads grounding features and ``text`` is None.
        """
        from halluprobe.features._records import reduce_forward

        records = reduce_forward(fs, ["query"])
        if self.uses_grounding:
            if text is None:
                raise ValueError(
                    f"detector {self.source or self.fit.feature_set} reads text grounding features (block "
                    "G): score_stats needs text=(context, question, answer)"
                )
            records = self._grounded(records, [_Triple("query", *text)])
        prob, token_probs = self._scores(fs, 0, records[0])
        return Prediction(
            prob, int(prob >= self.fit.threshold), self.fit.threshold, token_probs, list(tokens)
        )

    @property
    def uses_grounding(self) -> bool:
        """Whether the probe reads the text-only grounding block ``G`` (so scoring needs the text)."""
        return any(b.name == "G" for b in self.fit.blocks)

    def _grounded(self, records: list[ExampleRecord], items: Sequence[Any]) -> list[ExampleRecord]:
        """``records`` with their grounding features when the detector reads them (else as they are)."""
        if not self.uses_grounding:
            return records
        from halluprobe.features._grounding import fill_grounding

        return fill_grounding(records, items)

    def _scores(self, fs: ForwardStats, b: int, record: ExampleRecord) -> tuple[float, np.ndarray]:
        """The answer's probability and ``[A]`` per-token probabilities of example ``b``."""
        from halluprobe.features._records import token_records

        prob = float(self.score_records([record])[0])
        return prob, self.score_records(token_records(fs, b, record))

    def _prediction(
        self, ext: ProxyExtractor, fs: ForwardStats, b: int, record: ExampleRecord,
        encoded: tuple[list[int], int], text: tuple[str, str, str],
    ) -> Prediction:  # fmt: skip
        answer = text[2]
        from halluprobe.features._token_data import token_features, token_offsets
        from halluprobe.localisation._localisation import decode_spans
        from halluprobe.localisation._verdict_spans import token_probe_probs, verdict_spans

        ids, start = encoded
        prob, token_probs = self._scores(fs, b, record)
        label = int(prob >= self.fit.threshold)
        offsets = token_offsets(ext.tokenizer, answer, ids[start:])
        if self.token_probe is not None:
            feats = token_features(fs, b, record.answer_len, self.token_probe.view)
            logits = self.token_probe.decision_function(feats)
            spans = decode_spans(
                offsets, logits, self.token_probe.threshold, len(answer), self.token_probe.gap
            )
            span_probs = token_probe_probs(logits)
        else:
            spans = decode_spans(offsets, token_probs, self.fit.threshold, len(answer))
            span_probs = token_probs
        return Prediction(
            probability=prob,
            label=label,
            threshold=self.fit.threshold,
            token_scores=token_probs,
            tokens=[ext.tokenizer.decode([t], clean_up_tokenization_spaces=False) for t in ids[start:]],
            spans=verdict_spans(label, spans, offsets, span_probs, text, prob),
        )


def _check_triple(i: int, triple: Any) -> tuple[str, str, str]:
    if (
        not isinstance(triple, tuple | list)
        or len(triple) != 3
        or not all(isinstance(x, str) for x in triple)
    ):
        raise ValueError(
            f"item {i}: expected a (context, question, answer) triple of strings, got {triple!r:.80}"
        )
    if not triple[2].strip():
        raise ValueError(f"item {i}: the answer is empty")
    return triple[0], triple[1], triple[2]


def _token_probe_from(meta: Any, tensors: dict[str, np.ndarray], where: str) -> TokenProbe | None:
    """The saved token probe (None when the detector has none), every field and array checked."""
    if meta is None:
        return None
    keys = ("intercept", "C", "threshold", "val_auroc")
    if not isinstance(meta, dict):
        raise ValueError(f"{where}: field 'token_probe' must be an object with numbers {keys}")
    for key in keys:
        dfile.number(meta, key, where, field=f"token_probe.{key}")
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


def _no_constant(name: str) -> None:
    raise ValueError(f"a detector file holds the non-finite number {name}; every field must be finite")


def _fit_from(doc: dict[str, Any], tensors: dict[str, np.ndarray], doc_where: str, where: str) -> ProbeFit:
    """The `ProbeFit` of a checked document (``doc_where``) and its tensors (``where``), arrays checked."""
    blocks, width = [], 0
    for i, cfg in enumerate(doc["blocks"]):
        prefix = f"block{i}."
        arrays = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        try:
            block = block_from_state(cfg, arrays)
        except (KeyError, TypeError, ValueError) as exc:
            detail = f"lacks {exc}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"{doc_where}: field 'blocks[{i}]' ({cfg.get('name')!r}): {detail}") from None
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
