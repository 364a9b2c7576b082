"""TOHA's dense input: the response block of every head, materialised (tier T4), reduced to MTopDiv.

Only runs when TOHA is requested. The recorded forward itself materialises the ``[A, L]`` response
block of the requested heads (``record_forward(..., dense_heads=...)``, tier T4 in the same forward:
no second forward, no full attention maps); `recorded_mtopdiv` reduces each to one MTopDiv value on
the device by `mtopdiv_batched` (all heads at once; the NumPy
[`halluprobe.detectors.mtopdiv`][halluprobe.mtopdiv] is its reference).
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


def dense_heads_of(model, layers: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """Every query head of each scored layer: the ``dense_heads`` TOHA asks ``record_forward`` for."""
    config = model.config.get_text_config()
    return {layer: tuple(range(int(config.num_attention_heads))) for layer in layers}


def recorded_mtopdiv(fs) -> torch.Tensor:
    """``[B, NL, H] float32`` (on the CPU) MTopDiv of every head whose block the forward recorded.

    Reads the response blocks that ``record_forward(..., dense_heads=...)`` materialised in the same
    forward (`flashstats_hf.ForwardStats.dense`, one ``[B, H, A, L]`` block per scored layer, every
    layer with the same number of heads); no second forward.

    Args:
        fs: A `flashstats_hf.ForwardStats` whose ``dense`` holds every layer of ``fs.layers``.
    """
    missing = [layer for layer in fs.layers if layer not in fs.dense]
    if missing:
        raise ValueError(f"TOHA needs the response blocks of every scored layer; layers {missing} have none")
    out = []
    lengths = fs.key_mask.sum(1).tolist()
    for b, (a, p, n) in enumerate(zip(fs.answer_len.tolist(), fs.prompt_len.tolist(), lengths, strict=True)):
        pad = fs.key_mask.shape[1] - n
        rows = torch.cat([fs.dense[layer][b, :, :a, pad:] for layer in fs.layers])  # [NL * H, A_b, L_b]
        out.append(mtopdiv_batched(rows, p).view(len(fs.layers), -1).float().cpu())
    return torch.stack(out)
