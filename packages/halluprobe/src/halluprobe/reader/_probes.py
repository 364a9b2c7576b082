"""The paper's probes read from the adapted reader beside the same probes on the frozen proxy.

Does fine-tuning make the attention statistics carry the signal they lack in a frozen small proxy?
`probe_comparison` answers it on one dataset: it extracts every example's records twice, from the frozen
proxy and from the reader's adapted proxy (adapters merged into its weights, so the same recorded forward
reads it), fits each feature set on the train split by the probes' own protocol (heads ranked by
induction on each model, ``C`` and ``K`` chosen and the probe calibrated on validation), and scores the
test split.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["probe_comparison"]


def _records(ext, examples, proxy_key: str, batch_size: int) -> list:
    from halluprobe.features._cache import FeatureCache
    from halluprobe.features._extract import extract_records

    with tempfile.TemporaryDirectory(prefix="halluprobe-probes-") as tmp:
        cache = FeatureCache(Path(tmp), {**ext.settings, "proxy": proxy_key})
        return extract_records(
            examples, ext, cache, batch_size=batch_size, token_budget=16384, length=ext.length
        )


def _fit_and_test(ext, examples, feature_sets, proxy_key, batch_size, n_bootstrap, seed) -> dict[str, Any]:
    from halubench_data.metrics import evaluate

    from halluprobe.blocks._induction import induction_scores, rank_heads
    from halluprobe.training._protocol import train_feature_sets

    records = _records(ext, examples, proxy_key, batch_size)
    part = {s: [i for i, e in enumerate(examples) if e.split == s] for s in ("train", "validation", "test")}
    y = np.array([e.label for e in examples])
    n_layers = int(ext.model.config.num_hidden_layers)
    order = rank_heads(induction_scores(ext.model), tuple(range(n_layers)))
    fits = train_feature_sets(
        list(feature_sets), order, [records[i] for i in part["train"]], y[part["train"]],
        [str(examples[i].group) for i in part["train"]], [records[i] for i in part["validation"]],
        y[part["validation"]], val_sources=[examples[i].source for i in part["validation"]],
    )  # fmt: skip
    test = [records[i] for i in part["test"]]
    groups = [str(examples[i].group) for i in part["test"]]
    out = {}
    for name, fit in fits.items():
        res = evaluate(
            fit.decision_function(test), y[part["test"]], groups, 0.0, n_bootstrap=n_bootstrap, seed=seed
        )
        out[name] = {"auroc": res.auroc, "auroc_ci": list(res.auroc_ci), "n": res.n}
    return out


def probe_comparison(
    reader,
    examples: Sequence[Any],
    feature_sets: Sequence[str],
    *,
    device: str | None = None,
    batch_size: int = 16,
    n_bootstrap: int = 1000,
    seed: int = 42,
) -> dict[str, dict[str, Any]]:
    """``{"frozen": {set: {auroc, auroc_ci, n}}, "adapted": {...}}`` on ``examples``' test split.

    Args:
        reader: A fitted [`Reader`][halluprobe.Reader]; its proxy (``reader.proxy``) is the
            frozen model, its adapted proxy the other.
        examples: `halubench_data.Example` with train, validation and test splits.
        feature_sets: The probes (``"A7"``, ``"H64"``, ``"A7H64"``, ...).
        device: Torch device of both models.
        batch_size: Most examples per recorded forward.
        n_bootstrap: Group-bootstrap resamples of each interval.
        seed: Bootstrap seed.
    """
    from flashstats_hf import load_model

    from halluprobe.blocks._blocks import parse_feature_set
    from halluprobe.features._extract import ProxyExtractor

    for name in feature_sets:
        parse_feature_set(name)
    model, tok = load_model(reader.proxy, device=device)
    frozen = ProxyExtractor(model, tok, contrast=False)
    reader_ext = reader.extractor(device)
    adapted = ProxyExtractor(reader_ext.model, tok, contrast=False)
    adapted._weights = reader_ext._weights  # the adapted weights' digest: frozen and adapted never share
    key = reader.proxy or "default"
    return {
        "frozen": _fit_and_test(frozen, examples, feature_sets, key, batch_size, n_bootstrap, seed),
        "adapted": _fit_and_test(adapted, examples, feature_sets, key, batch_size, n_bootstrap, seed),
    }
