"""Where the whole-forward overhead of the 7-8B shapes at 32K with a 512-token answer goes.

Random-weight Qwen2.5-7B and Qwen3-8B shapes (`families.FAMILIES`), bf16, batch 1, eager, decoder body.
Side by side in one process: the plain forward (SDPA), then ``record_forward`` with the response rows
split off (``StatsRequest(rows=False)``: prompt rows through SDPA, the 512 response rows through our
Base kernel, no statistic) and with the cumulative tiers <=T1, <=T2, <=T3 (every layer). The steps
between them are the cost of the split attention and of each tier. Writes ``tier_share.csv`` and
``tier_share.md``.
"""

from __future__ import annotations

import torch
from _perf import Deadline, LongCsv, command_line, markdown_table, parse_args
from families import FAMILIES, build
from whole_forward import timed

POINTS = (("Qwen2.5-7B", 32768), ("Qwen3-8B", 32768), ("Qwen3-8B", 2048))
ROWS = 512
MODES = ("plain", "split", "t1", "t2", "t3")


def requests() -> dict:
    from flashstats_kernels import StatsRequest

    return {
        "split": StatsRequest(rows=False),
        "t1": StatsRequest(rows=True),
        "t2": StatsRequest(rows=True, lookups=True, sink_positions=(0,)),
        "t3": StatsRequest(rows=True, lookups=True, columns=True, sink_positions=(0,)),
    }


def one_point(csv: LongCsv, name: str, model, length: int) -> None:
    from flashstats_hf import record_forward

    ids = torch.randint(0, FAMILIES[name][1]["vocab_size"], (1, length), device="cuda")
    reps = 3 if length >= 16384 else 10
    with torch.no_grad():
        ms, _ = timed(lambda: model.model(input_ids=ids, use_cache=False), reps)
        csv.add(model=name, L=length, R=ROWS, mode="plain", ms=f"{ms:.3f}")
        for mode, req in requests().items():
            run = lambda r=req: record_forward(
                model, ids, response_start=length - ROWS, request=r, logits=False
            )  # noqa: E731
            ms, _ = timed(run, reps)
            csv.add(model=name, L=length, R=ROWS, mode=mode, ms=f"{ms:.3f}")
    torch.cuda.empty_cache()


def report(csv: LongCsv, out) -> None:
    at: dict = {}
    for r in csv.rows:
        at.setdefault((r["model"], int(r["L"])), {})[r["mode"]] = float(r["ms"])
    head = ["model", "L", "plain ms", "split +%", "<=T1 +%", "<=T2 +%", "<=T3 +%",
            "split step", "T1 step", "T2 step", "T3 step"]  # fmt: skip
    table = []
    for (name, length), m in at.items():
        if not all(k in m for k in MODES):
            continue
        p = m["plain"]
        pct = [f"{100 * (m[k] / p - 1):+.2f}" for k in MODES[1:]]
        steps = [f"{100 * (m[b] - m[a]) / p:+.2f}" for a, b in zip(MODES, MODES[1:], strict=False)]
        table.append([name, length, f"{p:.1f}", *pct, *steps])
    env = csv.env
    text = f"# Tier shares at R = {ROWS} ({env['gpu']}, torch {env['torch']}, triton {env['triton']}, "
    text += (
        f"{env['date']})\n\n"
        + command_line()
        + "Eager, every layer; '+%' against the plain SDPA forward; 'step' = each mode "
    )
    text += "minus the one before, in % of plain.\n\n"
    (out / "tier_share.md").write_text(text + markdown_table(head, table))


def main() -> None:
    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    csv = LongCsv(args.out / "tier_share.csv", ("model", "L", "R", "mode", "ms"))
    deadline = Deadline(args.budget)
    name, model = None, None
    for fam, length in POINTS[-1:] if args.quick else POINTS:
        if deadline.over():
            print("budget spent: stopping early")
            break
        if fam != name:
            del model
            torch.cuda.empty_cache()
            name, model = fam, build(fam)
        one_point(csv, fam, model, length)
        print(f"{fam} L={length} done", flush=True)
    csv.close()
    report(csv, args.out)
    print((args.out / "tier_share.md").read_text())


if __name__ == "__main__":
    main()
