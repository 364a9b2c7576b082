"""A trained proxy detector: a scikit-learn classifier, saved and loaded without pickle or code.

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
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from halluprobe._numeric import sigmoid
from halluprobe.detectors import _detector_file as dfile
from halluprobe.detectors._detector_file import FORMAT_VERSION
from halluprobe.detectors._prediction import (
    Item,
    Prediction,
    as_items,
    predict_triples,
    stats_prediction,
    text_records,
)

if TYPE_CHECKING:
    from flashstats_hf import ForwardStats

    from halluprobe.features._extract import ProxyExtractor
    from halluprobe.features._records import ExampleRecord
    from halluprobe.localisation._localisation import TokenProbe
    from halluprobe.training._protocol import ProbeFit

__all__ = ["FORMAT_VERSION", "Detector", "Prediction"]

_JSON, _TENSORS = "detector.json", "detector.safetensors"


class Detector(ClassifierMixin, BaseEstimator):
    """A feature-set probe on a proxy's statistics, as a scikit-learn binary classifier.

    Scores: higher means more likely hallucinated; labels: 1 = hallucinated, 0 = supported.

    ``X`` is a sequence of ``n`` rows, either **texts** (each a `halubench_data.Example`, a mapping with
    ``"context"``, ``"answer"`` and optional ``"question"``, or a ``(context, question, answer)``
    triple), which the detector runs through its proxy (loaded on first use), or **records**
    (`halluprobe.ExampleRecord`, features already extracted with this detector's proxy settings). The
    probe reads the records' feature blocks (``feature_set``): the blocks' own transforms make the
    ``[n, d]`` matrix of its logistic regression (`halluprobe.ProbeFit.features`).

    ``fit`` runs the paper's protocol on one feature set: blocks and the logistic regression fitted on
    the training rows; ``C``, A7's head count ``K`` and the threshold chosen on the validation rows (A64's
    ``k`` by grouped cross-validation on train); then a Platt calibration on validation, folded into the
    weights. [`halluprobe.train`][] does all of it from examples in one call.

    Args:
        feature_set: Blocks of the probe, e.g. ``"A7L9"``, ``"GA7H64"`` or ``"ALL"``
            (`halluprobe.parse_feature_set`).
        proxy: Proxy id for [`flashstats_hf.load_model`][] (``None``: the default SmolLM2).
        layers: Scored layers (``None``: all).
        hidden_layers: Kept hidden layers (``None``: the proxy's middle layer).
        head_order: Flat head indices ranked by induction score, strongest first (``None``: ranked on the
            proxy by `halluprobe.induction_scores` when the feature set has A7).
        validation_fraction: Share of the rows ``fit`` holds out for validation when it is not given one.
        random_state: Seed of that held-out split.
        batch_size: Most texts per proxy forward.
        device: Device of the proxy (``None``: CUDA when available).

    Attributes:
        probe_ (ProbeFit): The fitted probe (blocks, scaler, weights, ``C``, ``threshold``).
        token_probe_ (TokenProbe | None): A token probe for spans (`halluprobe.localisation`), or None.
        hidden_layers_ (tuple[int, ...]): The hidden layers the records keep.
        classes_ (numpy.ndarray): ``[0, 1]``.
        source (pathlib.Path | None): The folder this detector was loaded from (None when built in memory).
    """

    source: Path | None = None
    _extractor: ProxyExtractor | None = None

    def __init__(
        self,
        feature_set: str = "A7L9",
        *,
        proxy: str | None = None,
        layers: Sequence[int] | None = None,
        hidden_layers: Sequence[int] | None = None,
        head_order: Sequence[int] | None = None,
        validation_fraction: float = 0.25,
        random_state: int = 0,
        batch_size: int = 8,
        device: str | None = None,
    ):
        self.feature_set = feature_set
        self.proxy = proxy
        self.layers = layers
        self.hidden_layers = hidden_layers
        self.head_order = head_order
        self.validation_fraction = validation_fraction
        self.random_state = random_state
        self.batch_size = batch_size
        self.device = device

    @classmethod
    def from_probe(
        cls,
        probe: ProbeFit,
        *,
        proxy: str | None = None,
        layers: Sequence[int] | None = None,
        hidden_layers: Sequence[int],
        token_probe: TokenProbe | None = None,
    ) -> Detector:
        """A fitted detector from a fitted probe (`halluprobe.fit_blocks`) and the settings of its records."""
        hidden = tuple(int(i) for i in hidden_layers)
        det = cls(
            probe.feature_set,
            proxy=proxy,
            layers=None if layers is None else tuple(int(i) for i in layers),
            hidden_layers=hidden,
        )
        det._fitted(probe, token_probe, hidden)
        return det

    def _fitted(self, probe: ProbeFit, token_probe: TokenProbe | None, hidden: tuple[int, ...]) -> None:
        self.probe_, self.token_probe_, self.hidden_layers_ = probe, token_probe, hidden
        self.classes_ = np.array([0, 1])

    def fit(
        self, X: Any, y: Any, *, groups: Any = None, sources: Any = None, validation: Any = None
    ) -> Detector:
        """Fit the probe on ``X`` and labels ``y`` (the protocol in the class docstring); returns self.

        Args:
            X: ``n`` rows, texts or records (class docstring).
            y: ``[n]`` labels, 1 = hallucinated, 0 = supported; both in the training and validation rows.
            groups: ``[n]`` group ids: rows of one group stay on one side of the validation split and of
                the cross-validation folds (``None``: an `Example`'s ``group``, else one group per row).
            sources: ``[n]`` source names; the calibration weighs every source the same (``None``: an
                `Example`'s ``source``, else one source).
            validation: ``[n] bool``, True on the validation rows; ``None``: a stratified group split
                holds out about ``validation_fraction`` of the rows (seed ``random_state``).

        Raises:
            ValueError: ``X`` and ``y`` differ in length, a label is not 0 or 1, a side of the split
                lacks a label, or ``feature_set`` is unknown.
        """
        from halluprobe.detectors._fitting import fit_detector

        return fit_detector(self, X, y, groups=groups, sources=sources, validation=validation)

    def records(self, X: Any) -> list[ExampleRecord]:
        """The records of the rows of ``X`` (texts run through the proxy in batches; records as given)."""
        rows = as_items(X)
        if not isinstance(rows[0], Item):
            return rows
        return text_records(self.extractor(), rows, self.batch_size)

    def decision_function(self, X: Any) -> np.ndarray:
        """``[n] float64`` logits of the rows of ``X``; higher means more likely hallucinated."""
        return self.score_records(self.records(X), logits=True)

    def predict_proba(self, X: Any) -> np.ndarray:
        """``[n, 2] float64``: columns follow ``classes_`` (column 1 = hallucinated); rows sum to 1."""
        p = sigmoid(self.decision_function(X))
        return np.stack([1.0 - p, p], 1)

    def predict(self, X: Any, *args: Any, **kwargs: Any) -> Any:
        """``[n] int64`` labels of ``X``: 1 (hallucinated) where the probability reaches the threshold.

        ``predict(context, question, answer)`` (three strings) is the old form of
        [`predict_text`][halluprobe.Detector.predict_text]: it still works, with a DeprecationWarning.
        """
        if isinstance(X, str):
            warnings.warn(
                "Detector.predict(context, question, answer) is deprecated: use Detector.predict_text; "
                "predict(X) takes a sequence of rows and returns labels",
                DeprecationWarning,
                stacklevel=2,
            )
            return self.predict_text(X, *args, **kwargs)
        return (self.predict_proba(X)[:, 1] >= self.probe_.threshold).astype(np.int64)

    def save(self, path: str | Path) -> Path:
        """Write ``path/detector.json`` and ``path/detector.safetensors`` (atomically); returns ``path``."""
        meta = {
            "format_version": FORMAT_VERSION,
            "proxy": self.proxy,
            "layers": list(self.layers) if self.layers is not None else None,
            "hidden_layers": list(self.hidden_layers_),
        }
        return dfile.write_folder(Path(path), self.probe_, self.token_probe_, meta, _JSON, _TENSORS)

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
        if isinstance(doc, dict) and doc.get("kind") == "reader":
            raise ValueError(
                f"{where} holds a fine-tuned reader, not a probe detector: load it with "
                "halluprobe.load(path) or halluprobe.reader.Reader.load(path)"
            )
        dfile.check_format(doc, where)
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
        probe = dfile.probe_from(doc, tensors, where, str(path / _TENSORS))
        token_probe = dfile.token_probe_from(doc.get("token_probe"), tensors, str(path / _TENSORS))
        det = cls.from_probe(
            probe, proxy=doc["proxy"], layers=doc["layers"], hidden_layers=doc["hidden_layers"],
            token_probe=token_probe,
        )  # fmt: skip
        det.source = path
        return det

    def score_records(self, records: list, *, logits: bool = False) -> np.ndarray:
        """``[n]`` probabilities (or logits) of ``records``; higher = more likely hallucinated.

        Raises:
            ValueError: the records do not fit the detector (naming the detector and the expected shape).
            FloatingPointError: a score is not finite (non-finite features); never a silent verdict.
        """
        try:
            out = self.probe_.decision_function(records)
        except ValueError as exc:
            raise ValueError(f"detector {self._name}: {exc}") from None
        if not np.isfinite(out).all():
            raise FloatingPointError(
                f"detector {self._name}: {int((~np.isfinite(out)).sum())} score(s) are not finite (the "
                "proxy produced non-finite features); refusing to give a verdict"
            )
        return out if logits else sigmoid(out)

    @property
    def _name(self) -> str:
        return str(self.source or self.probe_.feature_set)

    def info(self) -> dict[str, Any]:
        """Feature set, threshold and selections, for display."""
        return {
            "feature_set": self.probe_.feature_set,
            "threshold": self.probe_.threshold,
            **self.probe_.selection,
        }

    def extractor(self, device: str | None = None) -> ProxyExtractor:
        """The proxy extractor (loads the proxy on first use); a fitted one computes only what it reads."""
        if self._extractor is None:
            from flashstats_hf import load_model

            from halluprobe.features._extract import ProxyExtractor

            model, tok = load_model(self.proxy, device=device or self.device)
            if hasattr(self, "probe_"):  # a loaded detector's indices, named against this proxy
                cfg = model.config
                dfile.check_against_proxy(self, int(cfg.num_hidden_layers), int(cfg.num_attention_heads))
            hidden = getattr(self, "hidden_layers_", self.hidden_layers)
            layers = None if self.layers is None else tuple(self.layers)
            self._extractor = ProxyExtractor(model, tok, layers, None if hidden is None else tuple(hidden))
            self._restrict_reads()
        return self._extractor

    def _restrict_reads(self) -> None:
        """A fitted detector's extractor computes only the statistics its probe reads."""
        from halluprobe.features._reads import detector_reads

        ext = self._extractor
        if ext is not None and hasattr(self, "probe_"):
            cfg = ext.model.config
            ext.reads = detector_reads(self, int(cfg.num_hidden_layers), int(cfg.num_attention_heads))

    def predict_text(
        self, context: str, question: str, answer: str, *, device: str | None = None
    ) -> Prediction:
        """Score one triple with the proxy (higher = more likely hallucinated).

        Returns:
            A [`Prediction`][halluprobe.Prediction], with the answer's predicted spans.
        """
        return self.predict_batch([(context, question, answer)], device=device)[0]

    def predict_batch(
        self,
        triples: Sequence[tuple[str, str, str]],
        *,
        device: str | None = None,
        batch_size: int = 8,
        threshold: float | str | None = None,
    ) -> list[Prediction]:
        """Score many ``(context, question, answer)`` triples with one loaded proxy, in batched forwards.

        Triples are grouped by length into forwards of at most ``batch_size``; the predictions come
        back in input order and match [`predict_text`][halluprobe.Detector.predict_text] on each triple
        up to padding round-off.

        Args:
            triples: ``(context, question, answer)`` strings.
            device: Torch device of the proxy (None: the detector's default).
            batch_size: Most answers per forward.
            threshold: What labels and spans follow (probabilities do not change): None, the
                detector's threshold; a number in [0, 1]; or ``"expected-f1"``, the threshold that
                maximises the batch's expected F1 under its own probabilities, no label needed
                ([`expected_f1_threshold`][halluprobe.expected_f1_threshold]; give it at least 20
                answers of one source: it follows their base rate). When no answer reaches the
                detector's threshold, the batch shows no hallucination and the detector's threshold
                labels it (expected F1 would flag every answer of such a batch).

        Raises:
            ValueError: a triple that is not three strings or has an empty answer, ``batch_size < 1``,
                or another ``threshold`` (``"expected-f1"`` with fewer than 20 answers).
        """
        return predict_triples(self, triples, device=device, batch_size=batch_size, threshold=threshold)

    def score_stats(
        self,
        fs: ForwardStats,
        tokens: list[str],
        text: tuple[str, str, str] | None = None,
        answer_ids: list[int] | None = None,
        bare: np.ndarray | None = None,
    ) -> Prediction:
        """Score the statistics of one answer (batch of 1) from any recording path.

        [`predict_text`][halluprobe.Detector.predict_text] reads them from one teacher-forced forward; the
        streaming scorer ([`halluprobe.StreamingScorer`][]) from a
        [`flashstats_hf.CachedRecorder`][] after each chunk. Equal statistics (and text) give equal
        predictions (without token offsets there are no character spans).

        Args:
            fs: A [`flashstats_hf.ForwardStats`][] of one example, recorded with this detector's
                layers, hidden layers, logits and the default request.
            tokens: The answer tokens as text (for display).
            text: ``(context, question, answer)``: needed by a detector with block ``G`` or ``C``.
            answer_ids: The answer token ids recorded, for block ``C`` (default: ``text``'s answer).
            bare: ``[A]``: those tokens' log-probabilities without the context, for block ``C``, when
                they were read already (the streaming scorer keeps them); None: one plain forward
                computes them.

        Returns:
            A [`Prediction`][halluprobe.Prediction] (higher = more likely hallucinated).

        Raises:
            ValueError: the detector reads block G or C and ``text`` is None.
        """
        return stats_prediction(self, fs, tokens, text, answer_ids, bare)

    @property
    def uses_grounding(self) -> bool:
        """Whether the probe reads the text-only grounding block ``G`` (so scoring needs the text)."""
        return any(b.name == "G" for b in self.probe_.blocks)

    @property
    def uses_contrast(self) -> bool:
        """Whether the probe reads the context contrast block ``C`` (a second forward without the context)."""
        return any(b.name == "C" for b in self.probe_.blocks)
