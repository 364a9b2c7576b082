"""`token_examples`: the per-token data of examples, computed by a proxy extractor's recorded forward.

Kept apart from `halluprobe.features._token_data` (the data and its views, which the extractor writes)
so that the extractor and the per-token data do not import each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from halluprobe.features._token_data import TokenExample, char_mask, check_view, token_features, token_offsets

if TYPE_CHECKING:
    from halluprobe.features._extract import ProxyExtractor

__all__ = ["token_examples"]


def token_examples(
    examples: Sequence, ext: ProxyExtractor, *, batch_size: int = 8, view: str = "mean"
) -> list[TokenExample]:
    """Per-token features, character offsets and annotated characters of halubench-data examples.

    Args:
        examples: `halubench_data.Example`s (their ``spans`` mark the hallucinated characters).
        ext: a `halluprobe.ProxyExtractor` (its eager recorded forward is used, batched by length).
        batch_size: examples per forward.
        view: The features (`TOKEN_VIEWS`); ``+hidden`` views use the extractor's ``hidden_layers``.

    Returns:
        One `TokenExample` per example, in input order.
    """
    from halluprobe.features._extract import plan_batches  # torch: imported when called

    check_view(view)
    encoded = [ext.encode(ex) for ex in examples]
    out: list[TokenExample | None] = [None] * len(examples)
    for idx in plan_batches([len(ids) for ids, _ in encoded], batch_size=batch_size):
        fs = ext.forward([encoded[i] for i in idx])
        for b, i in enumerate(idx):
            (ids, start), ex = encoded[i], examples[i]
            feats = token_features(fs, b, int(fs.answer_len[b]), view)
            offsets = token_offsets(ext.tokenizer, ex.answer, ids[start:])
            out[i] = TokenExample(feats, offsets, char_mask(ex.spans, len(ex.answer)), str(ex.group))
    return [e for e in out if e is not None]
