"""What `Reader.fit` does after the fine-tuning, and how a fitted reader loads its proxy and scores."""

from __future__ import annotations

import datetime
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from halubench_data import Example

from halluprobe.reader._data import ReaderRow, as_examples, encode_row

__all__ = ["ReaderProbe", "as_examples", "fit_reader_estimator", "load_adapted", "pending"]


class SkippedRowWarning(UserWarning):
    """A row the reader cannot read (longer than the proxy's positions) was left out of a fit."""


def validation_mask(examples: Sequence[Example], validation: Any, fraction: float, seed: int) -> np.ndarray:
    """``[n] bool``: the given mask, the examples' validation split, or a stratified group split."""
    if validation is not None:
        mask = np.asarray(validation, dtype=bool)
        if mask.shape != (len(examples),):
            raise ValueError(f"validation must be [n] bool for {len(examples)} rows, got shape {mask.shape}")
        return mask
    splits = [e.split for e in examples]
    if "validation" in splits:
        return np.array([s == "validation" for s in splits])
    if not 0 < fraction < 1:
        raise ValueError(f"validation_fraction must lie in (0, 1), got {fraction}")
    from sklearn.model_selection import StratifiedGroupKFold

    folds = max(2, int(round(1 / fraction)))
    y = np.array([e.label for e in examples])
    groups = np.array([e.group for e in examples])
    split = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed)
    _, val = next(split.split(np.zeros(len(y)), y, groups))
    mask = np.zeros(len(examples), dtype=bool)
    mask[val] = True
    return mask


def encode_examples(tokenizer, examples: Sequence[Example], limit: int | None) -> list[ReaderRow | None]:
    """Each example's `ReaderRow`, or None (with a `SkippedRowWarning` naming it) when it is too long."""
    out: list[ReaderRow | None] = []
    for ex in examples:
        try:
            out.append(encode_row(tokenizer, ex, max_positions=limit))
        except ValueError as exc:
            if "positions" not in str(exc):
                raise
            warnings.warn(f"{exc}; left out of the fit", SkippedRowWarning, stacklevel=3)
            out.append(None)
    return out


def _device(device: str | None) -> str:
    import torch

    return device or ("cuda" if torch.cuda.is_available() else "cpu")


def fit_reader_estimator(est, X: Any, y: Any, validation: Any, sources: Any):
    """[`Reader.fit`][halluprobe.Reader.fit] (its arguments)."""
    from flashstats_hf import load_model

    from halluprobe.reader._train import fit_reader

    settings = est.settings()
    settings.check()
    examples = as_examples(X, y, sources)
    mask = validation_mask(examples, validation, float(est.validation_fraction), int(est.seed))
    model, tok = load_model(est.proxy, device=_device(est.device))
    limit = getattr(model.config, "max_position_embeddings", None)
    encoded = encode_examples(tok, examples, limit if isinstance(limit, int) else None)
    keep = [i for i, r in enumerate(encoded) if r is not None]
    train = [encoded[i] for i in keep if not mask[i]]
    val = [encoded[i] for i in keep if mask[i]]
    fit = fit_reader(model, train, val, settings, bar=bool(est.progress))  # type: ignore[arg-type]
    est.spec_ = settings.adapter
    est.adapter_ = {k: v.half() for k, v in fit.adapter.items()}  # what is saved is what is used
    est.head_ = fit.head
    est._extractor = _adapted_extractor(model, tok, est)
    est._head = None
    val_examples = [examples[i] for i in keep if mask[i]]
    z_val = [t[2] for t in est.token_logits([(e.context, e.question, e.answer) for e in val_examples])]
    from halluprobe.reader._calibrate import finish_fit

    finish_fit(est, fit, val, val_examples, z_val)
    est.card_ = _card(est, model, fit, settings, examples, mask, keep, len(encoded) - len(keep))
    est.classes_ = np.array([0, 1])
    return est


def _adapted_extractor(model, tok, est):
    """A `ProxyExtractor` over ``model`` with ``est``'s adapters merged in (in place)."""
    import torch
    from flashstats_hf.loading import weights_digest

    from halluprobe.features._extract import ProxyExtractor
    from halluprobe.reader._model import merged_proxy

    base = weights_digest(model)
    merged = merged_proxy(model, est.spec_, {k: v.to(torch.float32) for k, v in est.adapter_.items()})
    merged.eval()
    n_layers = int(merged.config.num_hidden_layers)
    ext = ProxyExtractor(merged, tok, hidden_layers=(n_layers,), contrast=False)
    ext._weights = adapted_digest(base, est.adapter_)  # records of the adapted proxy never share a cache key
    return ext


def adapted_digest(base: str, adapter: dict) -> str:
    """The weights digest of a proxy (``base``, its `weights_digest`) with ``adapter`` merged in."""
    import hashlib

    import torch

    h = hashlib.sha256(base.encode())
    for name in sorted(adapter):
        t = adapter[name].detach().cpu().contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def load_adapted(est, device: str | None):
    """The adapted proxy of a fitted (or loaded) reader, as a `ProxyExtractor` (digest checked)."""
    from flashstats_hf import load_model
    from flashstats_hf.loading import weights_digest

    model, tok = load_model(est.proxy, device=_device(device))
    want = est.card_["proxy"].get("digest")
    got = weights_digest(model)
    if want and got != want:
        warnings.warn(
            f"reader {est._name}: its proxy was trained from weights with digest {want[:16]}..., the proxy "
            f"loaded now has {got[:16]}...; its scores may differ from those it was validated with",
            UserWarning,
            stacklevel=3,
        )
    return _adapted_extractor(model, tok, est)


def _card(est, model, fit, settings, examples, mask, keep, skipped) -> dict[str, Any]:
    import importlib

    import peft
    import torch
    import transformers
    from flashstats_hf.loading import weights_digest

    counts: dict[str, dict[str, int]] = {}
    for i in keep:
        e = examples[i]
        side = "validation" if mask[i] else "train"
        counts.setdefault(e.source, {"train": 0, "validation": 0})[side] += 1
    return {
        "proxy": {
            "name": est.proxy or "SmolLM2-135M-Instruct",
            "digest": weights_digest(model),
            "layers": int(model.config.num_hidden_layers),
            "width": int(model.config.hidden_size),
        },
        "sources": counts,
        "skipped_rows": int(skipped),
        "settings": settings.as_dict(),
        "training": {
            "steps": fit.steps,
            "best_step": fit.best_step,
            "tokens": fit.tokens,
            "seconds": round(fit.seconds, 3),
            "tokens_per_second": round(fit.tokens_per_second, 1),
            "history": fit.history,
        },  # fmt: skip
        "validation": est.validation_,
        "versions": {
            "halluprobe": importlib.import_module("halluprobe").__version__,  # also from a source tree
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
        },  # fmt: skip
        "created": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


@dataclass(frozen=True)
class ReaderProbe:
    """What the shared prediction and serving code read of a detector's probe, for a reader."""

    feature_set: str
    threshold: float
    val_auroc: float
    selection: dict = field(default_factory=dict)
    blocks: tuple = ()

    @classmethod
    def of(cls, est) -> ReaderProbe:
        s = est.scoring_
        name = f"reader ({s.pool})" if s.anchor is None else f"O+reader@{s.anchor.weight:g} ({s.pool})"
        return cls(name, float(s.threshold), float(est.validation_.get("auroc", float("nan"))))


def pending(est, triples: Sequence[tuple[str, str, str]], *, device: str | None, batch_size: int) -> list:
    """Each triple scored by the reader, before its threshold (`halluprobe.detectors._prediction`)."""
    from halluprobe._numeric import sigmoid
    from halluprobe.detectors._prediction import PendingPrediction, check_triple
    from halluprobe.features._token_data import token_offsets
    from halluprobe.localisation._spans import decode_spans

    triples = [check_triple(i, t) for i, t in enumerate(triples)]
    scored = est.token_logits(triples, device=device, batch_size=batch_size)
    s = est.scoring_
    probs = sigmoid(s.logit(s.raw([z for _, _, z in scored], triples)))
    tok = est.extractor(device).tokenizer
    out = []
    for (ids, start, z), p, text in zip(scored, probs, triples, strict=True):
        offsets = token_offsets(tok, text[2], ids[start:])
        spans = decode_spans(offsets, z, s.span_threshold, len(text[2]), s.span_gap)
        tokens = [tok.decode([t], clean_up_tokenization_spaces=False) for t in ids[start:]]
        token_probs = sigmoid(np.asarray(z, np.float64))
        out.append(PendingPrediction(float(p), token_probs, tokens, offsets, spans, token_probs, text))
    return out
