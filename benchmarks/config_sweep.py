"""Per-candidate timings of the tiers at d = 128: is a tier ratio missed because of the tile choice?

For each tuning candidate of the d = 128 tables (pinned with ``FLASHSTATS_CONFIG_INDEX``; the forward and
the key-major kernels pin the same index) and for the autotuned choice, times Base, <=T1, <=T2 and <=T3 on
the response rows (32 query / 8 KV heads, bf16, batch 1) at L in {16K, 32K}, r in {0.1, 0.3}. The report
gives each tier's ratio to Base with both on the autotuned choice, and with each on its fastest candidate.
Writes ``config_sweep.csv`` (long format) and ``config_sweep.md``.
"""

from __future__ import annotations

import os

import torch
from _attn_providers import TIERS, make_inputs, ours
from _perf import Deadline, LongCsv, bench_ms, markdown_table, parse_args

POINTS = ((16384, 0.1), (32768, 0.1), (16384, 0.3), (32768, 0.3))
CANDIDATES = ("auto", "0", "1", "2", "3")


def sweep(csv: LongCsv, length: int, ratio: float) -> None:
    rows = round(ratio * length)
    q, k, v = make_inputs(length, rows, 128)
    for cand in CANDIDATES:
        if cand == "auto":
            os.environ.pop("FLASHSTATS_CONFIG_INDEX", None)
        else:
            os.environ["FLASHSTATS_CONFIG_INDEX"] = cand
        for tier in TIERS:
            ms = bench_ms(ours(tier, q, k, v, rows))
            csv.add(L=length, r=ratio, R=rows, candidate=cand, tier=tier, ms=f"{ms:.4f}")
    os.environ.pop("FLASHSTATS_CONFIG_INDEX", None)
    del q, k, v
    torch.cuda.empty_cache()


def report(csv: LongCsv, out) -> None:
    at = {(r["L"], r["r"], r["candidate"], r["tier"]): float(r["ms"]) for r in csv.rows}
    table = []
    for length, ratio in POINTS:
        got = {(c, t): at.get((length, ratio, c, t)) for c in CANDIDATES for t in TIERS}
        if got[("auto", "base")] is None:
            continue
        best = {t: min((got[(c, t)], c) for c in CANDIDATES if got[(c, t)] is not None) for t in TIERS}
        line = [length, ratio, f"{got[('auto', 'base')]:.3f}"]
        for t in ("t1", "t2", "t3"):
            line.append(f"{got[('auto', t)] / got[('auto', 'base')]:.3f}")
            line.append(f"{best[t][0] / best['base'][0]:.3f} ({best[t][1]}/{best['base'][1]})")
        table.append(line)
    head = ["L", "r", "Base ms (auto)", "T1/Base auto", "T1/Base best (cand)", "T2/Base auto",
            "T2/Base best (cand)", "T3/Base auto", "T3/Base best (cand)"]  # fmt: skip
    env = csv.env
    text = f"# Tile candidates, d = 128 ({env['gpu']}, torch {env['torch']}, triton {env['triton']}, "
    text += f"{env['date']})\n\n"
    text += "'best (cand)': each tier and Base on their own fastest candidate (tier/Base candidates).\n\n"
    (out / "config_sweep.md").write_text(text + markdown_table(head, table))


def main() -> None:
    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    csv = LongCsv(args.out / "config_sweep.csv", ("L", "r", "R", "candidate", "tier", "ms"))
    deadline = Deadline(args.budget)
    for length, ratio in POINTS[:1] if args.quick else POINTS:
        if deadline.over():
            print("budget spent: stopping early")
            break
        sweep(csv, length, ratio)
        print(f"L={length} r={ratio} done", flush=True)
    csv.close()
    report(csv, args.out)
    print((args.out / "config_sweep.md").read_text())


if __name__ == "__main__":
    main()
