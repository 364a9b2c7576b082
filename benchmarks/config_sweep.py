"""Per-candidate timings of the tiers: is a tier ratio (or Base against FA2) missed for the tile choice?

For each tuning candidate of one head dim's tables (d = 128 unless ``CONFIG_SWEEP_D`` says otherwise;
pinned with ``FLASHSTATS_CONFIG_INDEX``; the forward and the key-major kernels pin the same index) and for
the autotuned choice, times Base, <=T1, <=T2 and <=T3 (or the tiers ``CONFIG_SWEEP_TIERS`` lists) on the
response rows (32 query / 8 KV heads, bf16, batch 1) at L in {16K, 32K}, r in {0.1, 0.3}, and SDPA-FA2 on
the same response block once per point. The report gives each tier's ratio to Base with both on the
autotuned choice, and with each on its fastest candidate, and FA2 over Base. Writes ``config_sweep.csv``
and ``config_sweep.md`` (``config_sweep_d{D}.*`` for another head dim).
"""

from __future__ import annotations

import os

import torch
from _attn_providers import TIERS, make_inputs, ours, sdpa_provider
from _perf import Deadline, LongCsv, bench_ms, command_line, markdown_table, parse_args

POINTS = ((16384, 0.1), (32768, 0.1), (16384, 0.3), (32768, 0.3))
CANDIDATES = ("auto", "0", "1", "2", "3")  # the d = 128 and d = 256 tables have four candidates each
D = int(os.environ.get("CONFIG_SWEEP_D", "128"))
SWEPT = tuple(t for t in os.environ.get("CONFIG_SWEEP_TIERS", ",".join(TIERS)).split(",") if t)
STEM = "config_sweep" if D == 128 else f"config_sweep_d{D}"


def sweep(csv: LongCsv, length: int, ratio: float) -> None:
    rows = round(ratio * length)
    q, k, v = make_inputs(length, rows, D)
    ms = bench_ms(sdpa_provider("fa2_block", q, k, v, rows))
    csv.add(L=length, r=ratio, R=rows, candidate="sdpa", tier="fa2_block", ms=f"{ms:.4f}")
    for cand in CANDIDATES:
        if cand == "auto":
            os.environ.pop("FLASHSTATS_CONFIG_INDEX", None)
        else:
            os.environ["FLASHSTATS_CONFIG_INDEX"] = cand
        for tier in SWEPT:
            ms = bench_ms(ours(tier, q, k, v, rows))
            csv.add(L=length, r=ratio, R=rows, candidate=cand, tier=tier, ms=f"{ms:.4f}")
    os.environ.pop("FLASHSTATS_CONFIG_INDEX", None)
    del q, k, v
    torch.cuda.empty_cache()


def report(csv: LongCsv, out) -> None:
    at = {(r["L"], r["r"], r["candidate"], r["tier"]): float(r["ms"]) for r in csv.rows}
    table = []
    tiers = [t for t in TIERS if any(r["tier"] == t for r in csv.rows)]
    for length, ratio in POINTS:
        got = {(c, t): at.get((length, ratio, c, t)) for c in CANDIDATES for t in tiers}
        if got.get(("auto", "base")) is None:
            continue
        best = {t: min((got[(c, t)], c) for c in CANDIDATES if got[(c, t)] is not None) for t in tiers}
        fa2 = at.get((length, ratio, "sdpa", "fa2_block"))
        line = [length, ratio, f"{got[('auto', 'base')]:.3f}"]
        line += (
            [f"{fa2 / got[('auto', 'base')]:.3f}", f"{fa2 / best['base'][0]:.3f} ({best['base'][1]})"]
            if fa2
            else ["", ""]
        )
        line += [f"{got[(c, 'base')]:.3f}" if got[(c, "base")] else "" for c in CANDIDATES[1:]]
        for t in tiers[1:]:
            line.append(f"{got[('auto', t)] / got[('auto', 'base')]:.3f}")
            line.append(f"{best[t][0] / best['base'][0]:.3f} ({best[t][1]}/{best['base'][1]})")
        table.append(line)
    head = ["L", "r", "Base ms (auto)", "FA2/Base auto", "FA2/Base best (cand)",
            *[f"Base ms cand {c}" for c in CANDIDATES[1:]]]  # fmt: skip
    for t in tiers[1:]:
        head += [f"{t.upper()}/Base auto", f"{t.upper()}/Base best (cand)"]
    env = csv.env
    text = f"# Tile candidates, d = {D} ({env['gpu']}, torch {env['torch']}, triton {env['triton']}, "
    text += f"{env['date']})\n\n" + command_line()
    text += "'best (cand)': each tier and Base on their own fastest candidate (tier/Base candidates); "
    text += "FA2: SDPA's FlashAttention-2 on the same response block.\n\n"
    (out / f"{STEM}.md").write_text(text + markdown_table(head, table))


def main() -> None:
    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    csv = LongCsv(args.out / f"{STEM}.csv", ("L", "r", "R", "candidate", "tier", "ms"))
    deadline = Deadline(args.budget)
    for length, ratio in POINTS[:1] if args.quick else POINTS:
        if deadline.over():
            print("budget spent: stopping early")
            break
        sweep(csv, length, ratio)
        print(f"L={length} r={ratio} done", flush=True)
    csv.close()
    report(csv, args.out)
    print((args.out / f"{STEM}.md").read_text())


if __name__ == "__main__":
    main()
