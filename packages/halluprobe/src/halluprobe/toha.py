"""TOHA's dense input: the response block of every head, materialised (tier T4), reduced to MTopDiv.

Only runs when TOHA is requested. Each example is run alone (no padding) through the model's eager
attention with ``output_attentions=True``; the ``[R, L]`` response rows of every scored head are
reduced to one MTopDiv value by [`halluprobe.detectors.mtopdiv`][halluprobe.mtopdiv] and the dense maps are
dropped.
"""

from __future__ import annotations

import torch

from halluprobe.detectors import mtopdiv


@torch.no_grad()
def dense_mtopdiv(model, encoded: list[tuple[list[int], int]], layers: tuple[int, ...]) -> torch.Tensor:
    """``[B, NL, H] float32`` MTopDiv of every head of the scored ``layers`` for each encoded example.

    Args:
        model: The proxy (its attention implementation is switched to eager for the call).
        encoded: ``(token ids, index of the first answer token)`` per example.
        layers: Scored layer indices, in the order of the records' layer axis.
    """
    dev = next(model.parameters()).device
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    out = []
    try:
        for ids, start in encoded:
            att = model(input_ids=torch.tensor([ids], device=dev), output_attentions=True, use_cache=False)
            per_layer = []
            for layer in layers:
                rows = att.attentions[layer][0, :, start:, :].double().cpu().numpy()  # [H, R, L]
                per_layer.append([mtopdiv(rows[h], start) for h in range(rows.shape[0])])
            out.append(per_layer)
    finally:
        model.set_attn_implementation(previous)
    return torch.tensor(out, dtype=torch.float32)
