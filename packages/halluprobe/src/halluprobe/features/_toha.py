"""TOHA's dense input: the response block of every head, materialised (tier T4), reduced to MTopDiv.

Only runs when TOHA is requested. Each example is run alone (no padding) through the model's eager
attention with ``output_attentions=True``; the ``[R, L]`` response rows of every scored head are
reduced to one MTopDiv value on the device by `mtopdiv_batched` (all heads at once; the NumPy
[`halluprobe.detectors.mtopdiv`][halluprobe.mtopdiv] is its reference) and the dense maps are dropped.
"""

from __future__ import annotations

import torch


def mtopdiv_batched(rows: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """MTopDiv of many heads at once on their device: Prim's algorithm, vectorised over heads.

    The same graph and value as the NumPy reference [`halluprobe.mtopdiv`][halluprobe.mtopdiv] (kept for
    tests): one vertex for the whole prompt, one per response token; edge weights ``1 - attention``
    (the largest over prompt keys for the prompt vertex, the larger of the two directions between
    response tokens); the minimum spanning tree's length over ``R``.

    Args:
        rows: ``[N, R, L] float``. Attention weights of the ``R`` response rows of ``N`` heads over
            ``L`` keys (the response is the last ``R`` keys).
        prompt_len: Number of prompt keys ``P`` (``1 <= P <= L - R``).

    Returns:
        torch.Tensor: ``[N] float64`` on ``rows``' device.
    """
    n, r, length = rows.shape
    if r < 1 or not 1 <= prompt_len <= length - r:
        raise ValueError(
            f"mtopdiv_batched needs [N, R, L] with 1 <= P <= L - R; got {tuple(rows.shape)}, {prompt_len}"
        )
    w = rows.double()
    start = length - r
    inf = torch.tensor(float("inf"), dtype=torch.float64, device=w.device)
    dist = torch.full((n, r + 1, r + 1), float("inf"), dtype=torch.float64, device=w.device)
    to_prompt = 1.0 - w[:, :, :prompt_len].amax(-1)  # [N, R]
    dist[:, 0, 1:] = to_prompt
    dist[:, 1:, 0] = to_prompt
    lower = torch.tril(torch.ones(r, r, dtype=torch.bool, device=w.device), -1)
    sym = torch.where(lower, 1.0 - w[:, :, start:], inf)  # [N, R, R]: row i attends to earlier j
    dist[:, 1:, 1:] = torch.minimum(sym, sym.transpose(1, 2))
    in_tree = torch.zeros(n, r + 1, dtype=torch.bool, device=w.device)
    in_tree[:, 0] = True
    best = dist[:, 0].clone()
    total = torch.zeros(n, dtype=torch.float64, device=w.device)
    ar = torch.arange(n, device=w.device)
    for _ in range(r):
        cand = torch.where(in_tree, inf, best)
        v = cand.argmin(1)
        total += cand[ar, v]
        in_tree[ar, v] = True
        best = torch.minimum(best, dist[ar, v])
    return total / r


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
            rows = torch.cat([att.attentions[i][0, :, start:, :] for i in layers])  # [NL * H, R, L]
            out.append(mtopdiv_batched(rows, start).view(len(layers), -1).float().cpu())
    finally:
        model.set_attn_implementation(previous)
    return torch.stack(out)
