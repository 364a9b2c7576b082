"""Triton kernels of the logit statistics: the vocabulary split over programs, then one merge per row.

A decoding step scores one row of a 50K-150K vocabulary; PyTorch's softmax and reductions run such a
row in one thread block each, and its top-k in six kernels (about 100 us per step on the H200). Here:

1. ``_partials_kernel``: one program per (vocabulary block of ``BLOCK`` logits, row) writes its block's
   max ``m``, ``l = sum e^(x - m)``, ``s = sum e^(x - m) (x - m)``, the count of logits above the
   target's, and its ``K`` largest logits.
2. ``_finish_kernel``: one program per row merges the blocks (``l`` and ``s`` rescaled to the global
   max, a fixed order) into the log-normaliser and the entropy, takes the ``K`` largest of the
   candidates and writes the row's ``6 + top`` statistics (`naive.naive_logit_statistics`'s columns).

The rank compares logits (``x > x_y``), as the reference does: log-probabilities of two different fp32
logits can round to one value.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from flashstats_kernels.ops._fused import interpreting

N_PART = 4  # fields of a block's partial state: m, l, s, count


@triton.jit
def _target_logit(Logits, Targets, i_n, s_row, V):
    """The row's target logit in fp32 (NaN for a target outside ``[0, V)``)."""
    t = tl.load(Targets + i_n)
    ok = (t >= 0) & (t < V)
    x = tl.load(Logits + i_n * s_row + tl.where(ok, t, 0)).to(tl.float32)
    return tl.where(ok, x, float("nan"))


@triton.jit
def _partials_kernel(Logits, Targets, Part, Cand, V, s_row, n_rows, n_blk,
                     BLOCK: tl.constexpr, K: tl.constexpr):  # fmt: skip
    i_p = tl.program_id(0)
    i_n = tl.program_id(1).to(tl.int64)
    o_v = i_p * BLOCK + tl.arange(0, BLOCK)
    valid = o_v < V
    x = tl.load(Logits + i_n * s_row + o_v, mask=valid, other=float("-inf")).to(tl.float32)  # [BLOCK]
    x_y = _target_logit(Logits, Targets, i_n, s_row, V)
    m = tl.max(x, 0)  # -inf for a block of masked (-inf) logits only
    d = x - tl.where(m > float("-inf"), m, 0.0)  # -inf past the vocabulary and for -inf logits
    e = tl.exp(d)
    b_l = tl.sum(e, 0)
    s = tl.sum(e * tl.where(e > 0.0, d, 0.0), 0)
    c = tl.sum((valid & (x > x_y)).to(tl.float32), 0)
    slot = i_n * n_blk + i_p
    n_slot = n_rows * n_blk
    tl.store(Part + slot, m)
    tl.store(Part + n_slot + slot, b_l)
    tl.store(Part + 2 * n_slot + slot, s)
    tl.store(Part + 3 * n_slot + slot, c)
    tl.store(Cand + slot * K + tl.arange(0, K), tl.topk(x, K))


@triton.jit
def _finish_kernel(Logits, Targets, Part, Cand, Out, V, s_row, s_out, n_rows, n_blk,
                   BLOCK_P: tl.constexpr, K: tl.constexpr, TOP: tl.constexpr):  # fmt: skip
    i_n = tl.program_id(0).to(tl.int64)
    o_p = tl.arange(0, BLOCK_P)
    m_p = o_p < n_blk
    slot = i_n * n_blk + o_p
    n_slot = n_rows * n_blk
    m = tl.load(Part + slot, mask=m_p, other=float("-inf"))
    b_l = tl.load(Part + n_slot + slot, mask=m_p, other=0.0)
    s = tl.load(Part + 2 * n_slot + slot, mask=m_p, other=0.0)
    c = tl.load(Part + 3 * n_slot + slot, mask=m_p, other=0.0)
    g = tl.max(m, 0)
    w = tl.where(m_p, tl.exp(m - g), 0.0)  # [BP] every factor in [0, 1]
    l_all = tl.sum(w * b_l, 0)
    s_all = tl.sum(w * (s + b_l * tl.where(b_l > 0.0, m - g, 0.0)), 0)  # sum e^(x - g) (x - g)
    log_l = tl.log(l_all)  # log-probabilities are (x - g) - log_l: no large lse is subtracted
    x_y = _target_logit(Logits, Targets, i_n, s_row, V)
    o_c = tl.arange(0, BLOCK_P * K)
    cand = tl.load(Cand + i_n * n_blk * K + o_c, mask=o_c < n_blk * K, other=float("-inf"))
    best = tl.sort(tl.topk(cand, K), descending=True)  # [K] the row's K largest logits
    o_k = tl.arange(0, K)
    p = tl.exp((best - g) - log_l)  # [K] ranked probabilities (0 past the vocabulary)
    p1 = tl.sum(tl.where(o_k == 0, p, 0.0), 0)
    p2 = tl.sum(tl.where(o_k == 1, p, 0.0), 0)
    b1 = tl.sum(tl.where(o_k == 0, best, 0.0), 0)
    p_out = Out + i_n * s_out
    tl.store(p_out, (x_y - g) - log_l)
    tl.store(p_out + 1, 1.0 + tl.sum(c, 0))
    tl.store(p_out + 2, log_l - s_all / l_all)
    tl.store(p_out + 3, p1 - p2)
    tl.store(p_out + 4, tl.sum(tl.where(o_k < 5, p, 0.0), 0))
    tl.store(p_out + 5, b1 - x_y)
    tl.store(p_out + 6 + o_k, p, mask=o_k < TOP)


def logit_statistics_triton(logits: torch.Tensor, targets: torch.Tensor, top: int) -> torch.Tensor:
    """``[N, 6 + top] float32``, the columns of `naive.naive_logit_statistics`, on the Triton kernels.

    Args:
        logits: [N, V] float16, bfloat16 or float32, on CUDA (or the CPU under the interpreter).
        targets: [N] int64 on the same device.
        top: ranked probabilities kept (at least 5).
    """
    n, v = logits.shape
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    k = max(64, triton.next_power_of_2(top))
    block = max(k, 256 if interpreting() else 4096)
    n_blk = triton.cdiv(v, block)
    dev = logits.device
    out = torch.empty(n, 6 + top, dtype=torch.float32, device=dev)
    if n == 0:
        return out
    part = torch.empty(N_PART, n, n_blk, dtype=torch.float32, device=dev)
    cand = torch.empty(n, n_blk, k, dtype=torch.float32, device=dev)
    tgt = targets.to(torch.int64).contiguous()
    _partials_kernel[(n_blk, n)](
        logits, tgt, part, cand, v, logits.stride(0), n, n_blk, BLOCK=block, K=k, num_warps=8
    )
    _finish_kernel[(n,)](
        logits, tgt, part, cand, out, v, logits.stride(0), out.stride(0), n, n_blk,
        BLOCK_P=triton.next_power_of_2(n_blk), K=k, TOP=top, num_warps=4,
    )  # fmt: skip
    return out


__all__ = ["logit_statistics_triton"]
