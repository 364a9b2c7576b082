"""Could T1's entropy sum run on the tensor cores? The precision of ``sum p s = q . (P K)`` (CPU, no kernel).

Without a soft cap, the entropy's ``sum_j p_j s_j`` equals ``scale * q . (sum_j p_j k_j)``: one more
``[BM, BN] x [BN, d]`` product per key tile (``P K``, like ``P V``) in place of one FP32 FMA per score.
Its ``P`` operand is the bf16-rounded weight tile, as for ``P V``. This emulates that arithmetic in PyTorch
on the CPU (bf16 inputs, fp32 accumulation) against fp64 and against today's fp32 per-score form, for
random ``q, k ~ N(0, 1)`` (``temp`` scales ``q``: 3 gives peaked rows), with the normaliser ``l`` from the
fp32 weights or from the rounded ones (``l~``: a ones column in the product), and with ``P`` split into
two bf16 parts (``hi + lo``: two products, and one subtraction and one rounding per score to form ``lo``).
Prints mean / max absolute entropy error per variant; ``--out`` writes the table as CSV.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import torch


def entropies(q: torch.Tensor, k: torch.Tensor) -> dict[str, torch.Tensor]:
    """Row entropies of ``softmax(q k^T / sqrt(d))`` by each variant.

    Args:
        q: [R, d] float64 holding bf16 values. Queries.
        k: [L, d] float64 holding bf16 values. Keys (every key visible from every row).

    Returns:
        ``{variant: [R] float64}``, ``"fp64"`` the reference.
    """
    scale = q.shape[1] ** -0.5
    s = q @ k.T * scale  # [R, L]
    m = s.amax(1, keepdim=True)
    p = torch.exp(s - m)
    l64 = p.sum(1)
    out = {"fp64": torch.log(l64) - (p * (s - m)).sum(1) / l64}
    p32, s32, m32 = p.float(), s.float(), m.float()
    l32 = p32.sum(1)
    out["fp32 per score (today)"] = torch.log(l32) - (p32 * (s32 - m32)).sum(1) / l32
    q32, k32 = q.float(), k.float()
    hi = p32.bfloat16().float()
    lo = (p32 - hi).bfloat16().float()
    for name, pt in (("q.(PK), P in bf16", hi), ("q.(PK), P as bf16 hi + lo", hi + lo)):
        sps = (q32 * (pt @ k32)).sum(1) * scale  # [R] sum p~ s (fp32 accumulation)
        out[name] = torch.log(l32) - (sps - m32[:, 0] * l32) / l32
        if name.endswith("bf16"):
            lt = pt.sum(1)  # l~: the ones column of the same product
            out["q.(PK), P in bf16, l~"] = torch.log(l32) - (sps - m32[:, 0] * lt) / lt
    return {key: val.double() for key, val in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="CSV to write (default: print only)")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for d in (64, 128):
        for temp in (1.0, 3.0):
            q = (torch.randn(256, d) * temp).bfloat16().double()
            k = torch.randn(4096, d).bfloat16().double()
            ent = entropies(q, k)
            ref = ent.pop("fp64")
            for name, val in ent.items():
                err = (val - ref).abs()
                rows.append({"d": d, "temp": temp, "variant": name, "mean_abs_err": f"{err.mean():.3g}",
                             "max_abs_err": f"{err.max():.3g}"})  # fmt: skip
                print(f"d={d} temp={temp} {name:28s} mean {err.mean():.2e} max {err.max():.2e}")
    if args.out is not None:
        with args.out.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
