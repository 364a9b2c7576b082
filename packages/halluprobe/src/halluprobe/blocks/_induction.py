"""Induction-head ranking measured on the proxy itself (Olsson et al., 2022).

We feed ``n_seqs`` sequences made of a random token block repeated twice and, for every head, average
the attention weight that a token of the second copy puts on the token that *followed* its earlier
occurrence (the copy target of an induction head). The weights come from the model's own eager
attention (``output_attentions=True``), not from our kernels: the score reads an off-diagonal
position that depends on the row, which T2's fixed sink positions cannot express, and the sequences
are short, so the dense map is cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@torch.no_grad()
def induction_scores(
    model: PreTrainedModel, *, block: int = 40, n_seqs: int = 4, seed: int = 0
) -> np.ndarray:
    """``[n_layers, H] float64`` mean induction attention of every head of every layer.

    Args:
        model: A Transformers causal LM (any attention implementation; eager is used temporarily).
        block: Length of the random token block (the sequence is ``2 * block`` tokens).
        n_seqs: Number of random sequences averaged.
        seed: Seed of the random tokens.
    """
    if block < 2 or n_seqs < 1:
        raise ValueError(f"induction_scores needs block >= 2 and n_seqs >= 1, got {block}, {n_seqs}")
    vocab = int(model.config.vocab_size)
    g = torch.Generator().manual_seed(seed)
    # avoid the lowest ids, which are special tokens in most vocabularies
    first = torch.randint(min(1000, vocab // 2), vocab, (n_seqs, block), generator=g)
    ids = torch.cat([first, first], 1).to(next(model.parameters()).device)
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        out = model(input_ids=ids, output_attentions=True, use_cache=False)
    finally:
        model.set_attn_implementation(previous)
    rows = torch.arange(block, 2 * block)  # second copy; its earlier occurrence is at row - block
    target = rows - block + 1
    scores = [att[:, :, rows, target].float().mean((0, 2)).cpu().numpy() for att in out.attentions]
    return np.stack(scores).astype(np.float64)


def rank_heads(scores: np.ndarray, layers: tuple[int, ...]) -> list[int]:
    """Flat indices into the ``len(layers) * H`` scored heads, strongest induction head first.

    Args:
        scores: ``[n_layers, H]`` from [`induction_scores`][halluprobe.induction_scores].
        layers: The scored layers, in the order of the records' layer axis.
    """
    sub = np.asarray(scores)[list(layers)]
    return [int(i) for i in np.argsort(-sub.reshape(-1), kind="stable")]
