"""What a whole forward with statistics costs at the paper's scale: memory per answer token, where the
long-context overhead goes, and the graphed plain forward captured two ways.

Qwen3-8B shape (random weights, bf16, batch 1, the model built by `paper_j_fig1.build`), in one process,
run by ``paper_j_fig1.py --extras`` after its Figure 1 curve (same model) or alone:

1. **Memory.** Extra peak of ``record_forward`` with every statistic over the plain forward's peak, at
   R in ``ANSWERS`` for every L: the least-squares slope per answer token and the intercept (the fixed
   part), with the columns reduced inside each layer (the default) and, at R = 512, kept in full
   (``full_columns=True``, the earlier behaviour); and the returned statistics' bytes per answer token.
2. **Overhead breakdown** at ``BREAKDOWN_LENGTHS``, R = 512, eager whole forwards: plain; ours with no
   statistic (``Base``: the split layer, SDPA on the prompt rows, our kernel on the answer rows, the two
   outputs concatenated); with row statistics (T1); with lookups (T2); with every statistic (T3). Their
   differences give the split, the row statistics, the lookups and the column pass. One attention call of
   the same shape (``do_bench``): SDPA over all L rows; SDPA over the P prompt rows; our kernel on the R
   answer rows (Base, T1, T2, all); joining the two outputs (and, for comparison, the earlier
   concatenation plus transposed copy). Launch and host cost: eager minus graphed.
3. **The graphed plain forward**, captured under ``"sdpa"`` (Transformers builds the dense L x L mask while
   capturing) beside `flashstats_hf.GraphedForward` (``"attnstats"``: SDPA causal, no mask), up to 16K.

Writes ``forward_cost.csv`` (long format, one measurement per row) and ``forward_cost.md``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from _perf import Deadline, LoadedCsv, LongCsv, command_line, markdown_table

ANSWERS = (256, 512, 1024)
"""Answer lengths of the memory fit."""
ROWS = 512
"""Answer length of the breakdown."""
MEMORY_LENGTHS = (2048, 35840, 8192, 32768, 16384)
BREAKDOWN_LENGTHS = (32768, 35840, 16384, 8192)
CAPTURE_LENGTHS = (8192, 16384, 2048)
"""Each section runs its lengths in this order (the most telling first) while its budget lasts."""
SMOKE = dict(answers=(8, 16, 24), rows=16, memory=(96,), breakdown=(96,))
"""Tiny shapes of a CPU smoke run (no memory peaks, no CUDA graphs)."""
PAPER_KIB_PER_TOKEN = 28.0
"""The paper's extra peak per answer token for Qwen3-8B (least-squares fit, Appendix I)."""
PAPER_STORED_KIB = 22.5
"""The paper's stored statistics per answer token for Qwen3-8B."""
FIXED_TARGET_MIB = 64.0
FIELDS = ("section", "L", "R", "mode", "ms", "extra_peak_mib", "stats_kib_per_token")


def _ours(model, ids, rows: int, **kw):
    from flashstats_hf import record_forward

    length = ids.shape[1]
    return lambda: record_forward(model, ids, response_start=length - rows, logits=False, **kw)


def _plain(model, ids):
    def run():
        with torch.no_grad():
            return model.model(input_ids=ids, use_cache=False)

    return run


def _mib(x: float | None) -> str:
    return "" if x is None else f"{x:.1f}"


def memory(dev, csv: LongCsv, model, deadline: Deadline, lengths, answers) -> None:
    """Section 1: plain and ours peaks at every (L, R) while the budget lasts (no peaks on a CPU)."""
    from whole_forward import stats_bytes

    for length in lengths:
        if deadline.over():
            return
        ids = torch.randint(0, model.config.vocab_size, (1, length), device=dev.type)
        plain = dev.peak(_plain(model, ids))
        csv.add(section="memory", L=length, R="", mode="plain", extra_peak_mib=_mib(plain))
        for rows, full in [(r, False) for r in answers] + [(answers[1], True)]:
            fn = _ours(model, ids, rows, full_columns=full)
            mib = dev.peak(fn)
            kib = stats_bytes(fn()) / rows / 1024 if rows == answers[1] else None
            mode = "ours_full_columns" if full else "ours"
            extra = None if mib is None or plain is None else mib - plain
            csv.add(section="memory", L=length, R=rows, mode=mode, extra_peak_mib=_mib(extra),
                    stats_kib_per_token="" if kib is None else f"{kib:.2f}")  # fmt: skip
        print(f"memory L={length} done", flush=True)


def breakdown(dev, csv: LongCsv, model, deadline: Deadline, lengths, rows: int) -> None:
    """Section 2: whole forwards per tier, then one attention call's parts, at each length.

    Each forward is timed after one warm-up, as the median of two runs below 32K tokens and one above
    (a 36-layer forward then lasts 1.5 s or more).
    """
    from flashstats_kernels import StatsRequest

    tiers = {
        "base": StatsRequest(rows=False),
        "t1": StatsRequest(rows=True),
        "t2": StatsRequest(rows=True, lookups=True, sink_positions=(0,)),
        "t3": StatsRequest(rows=True, lookups=True, columns=True, sink_positions=(0,)),
    }
    for length in lengths:
        if deadline.over():
            return
        ids = torch.randint(0, model.config.vocab_size, (1, length), device=dev.type)
        key, reps = dict(section="breakdown", L=length, R=rows), 1 if length >= 32768 else 2
        csv.add(**key, mode="plain", ms=f"{dev.wall_ms(_plain(model, ids), reps):.3f}")
        for name, req in tiers.items():
            csv.add(
                **key,
                mode=f"ours_{name}",
                ms=f"{dev.wall_ms(_ours(model, ids, rows, request=req), reps):.3f}",
            )
        for mode, ms in layer_parts(dev, length, rows, tiers).items():
            csv.add(section="layer", L=length, R=rows, mode=mode, ms=f"{ms:.4f}")
        print(f"breakdown L={length} done", flush=True)


def layer_parts(dev, length: int, rows: int, tiers: dict) -> dict[str, float]:
    """One Qwen3-8B attention call of L tokens split into its parts (median ms of each)."""
    import torch.nn.functional as F
    from flashstats_kernels import response_attention

    g = torch.Generator(device=dev.type).manual_seed(length)
    q, k, v = (
        torch.randn(1, h, length, 128, generator=g, device=dev.type, dtype=dev.dtype) for h in (32, 8, 8)
    )
    p = length - rows

    def sdpa(qq, kk, vv):
        return F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, enable_gqa=True)

    from flashstats_hf._recorder import _joined

    prompt, answer = sdpa(q[:, :, :p], k[:, :, :p], v[:, :, :p]), q[:, :, p:]
    rows_out = answer.contiguous()  # the answer rows' output as the kernel returns it ([B, Hq, R, D])
    parts = {
        "sdpa_all_rows": lambda: sdpa(q, k, v),
        "sdpa_prompt_rows": lambda: sdpa(q[:, :, :p], k[:, :, :p], v[:, :, :p]),
        # what Transformers receives: the concatenation, then its transpose made contiguous (the earlier
        # split layer), against the token-major join the recorder uses now (one copy)
        "concat": lambda: torch.cat([prompt, rows_out], 2).transpose(1, 2).contiguous(),
        "join": lambda: _joined(prompt, rows_out).transpose(1, 2).contiguous(),
    }
    for name, req in tiers.items():
        parts[f"answer_rows_{name}"] = lambda req=req: response_attention(answer, k, v, request=req)
    return {name: dev.kernel_ms(fn) for name, fn in parts.items()}


def captured_plain(dev, csv: LongCsv, model, deadline: Deadline, reps: int = 2) -> None:
    """Section 3: the plain forward captured under "sdpa" and under "attnstats" (GraphedForward)."""
    from flashstats_hf.attention import register_flashstats
    from whole_forward import graphed_plain

    for length in CAPTURE_LENGTHS:
        if deadline.over():
            return
        ids = torch.randint(0, model.config.vocab_size, (1, length), device=dev.type)
        for impl in ("sdpa", register_flashstats()):
            model.set_attn_implementation(impl)
            try:
                run, graph = graphed_plain(model, ids)
                csv.add(
                    section="capture",
                    L=length,
                    R="",
                    mode=f"graph_{impl}",
                    ms=f"{dev.wall_ms(run, reps):.3f}",
                )
                del run, graph
            finally:
                model.set_attn_implementation(register_flashstats())
            torch.cuda.empty_cache()
        print(f"capture L={length} done", flush=True)


def _fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``(slope, intercept)`` of ``y = slope * x + intercept``."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / var if var else float("nan")
    return slope, my - slope * mx


def _rows(csv, section: str) -> dict[tuple, dict]:
    return {(int(r["L"]), str(r["R"]), r["mode"]): r for r in csv.rows if r["section"] == section}


def memory_table(csv, answers=ANSWERS) -> str:
    got = _rows(csv, "memory")
    head = ["L", *(f"extra peak MiB, R = {r}" for r in answers), "KiB per answer token (fit)",
            "fixed MiB (fit)", "stored KiB per answer token",
            f"full columns, extra peak MiB at R = {answers[1]}", "met"]  # fmt: skip
    out = []
    for length in sorted({k[0] for k in got}):
        pts = [(r, float(got[(length, str(r), "ours")]["extra_peak_mib"])) for r in answers
               if got.get((length, str(r), "ours"), {}).get("extra_peak_mib")]  # fmt: skip
        if len(pts) < 2:
            continue
        slope, fixed = _fit(pts)
        kib = slope * 1024
        mid = str(answers[1])
        stored = got.get((length, mid, "ours"), {}).get("stats_kib_per_token", "")
        full = got.get((length, mid, "ours_full_columns"), {}).get("extra_peak_mib", "")
        met = kib <= PAPER_KIB_PER_TOKEN and fixed <= FIXED_TARGET_MIB
        out.append([length, *(f"{y:.1f}" for _, y in pts), f"{kib:.1f}", f"{fixed:.1f}", stored, full,
                    "met" if met else "missed"])  # fmt: skip
    return markdown_table(head, out)


def breakdown_table(csv, rows: int = ROWS) -> str:
    whole, layer = _rows(csv, "breakdown"), _rows(csv, "layer")
    head = ["L", "plain ms", "Base +%", "T1 +%", "T2 +%", "all +%", "split (Base - plain) ms",
            "row stats ms", "lookups ms", "column pass ms", "per layer: SDPA all rows ms",
            "SDPA prompt rows + answer rows (Base) + join ms", "concat + transpose ms (before)",
            "join ms (now)",
            "answer rows T1 / T2 / all ms"]  # fmt: skip
    out = []
    for length in sorted({k[0] for k in whole}):
        ms = {m: float(whole[(length, str(rows), m)]["ms"]) for m in ("plain", "ours_base", "ours_t1",
              "ours_t2", "ours_t3") if (length, str(rows), m) in whole}  # fmt: skip
        if len(ms) < 5:
            continue
        lay = {m: float(r["ms"]) for (n, _, m), r in layer.items() if n == length}
        pct = [
            f"{100 * (ms[m] / ms['plain'] - 1):+.1f}" for m in ("ours_base", "ours_t1", "ours_t2", "ours_t3")
        ]
        split = lay.get("sdpa_prompt_rows", 0) + lay.get("answer_rows_base", 0) + lay.get("join", 0)
        tiers = " / ".join(f"{lay.get(f'answer_rows_{t}', float('nan')):.3f}" for t in ("t1", "t2", "t3"))
        out.append([length, f"{ms['plain']:.1f}", *pct, f"{ms['ours_base'] - ms['plain']:.1f}",
                    f"{ms['ours_t1'] - ms['ours_base']:.1f}", f"{ms['ours_t2'] - ms['ours_t1']:.1f}",
                    f"{ms['ours_t3'] - ms['ours_t2']:.1f}", f"{lay.get('sdpa_all_rows', float('nan')):.3f}",
                    f"{split:.3f}", f"{lay.get('concat', float('nan')):.3f}",
                    f"{lay.get('join', float('nan')):.3f}", tiers])  # fmt: skip
    return markdown_table(head, out)


def capture_table(csv) -> str:
    got = _rows(csv, "capture")
    out = []
    for length in sorted({k[0] for k in got}):
        sdpa, ours = (got.get((length, "", f"graph_{m}"), {}).get("ms", "") for m in ("sdpa", "attnstats"))
        ratio = f"{float(sdpa) / float(ours):.2f}" if sdpa and ours else ""
        out.append([length, sdpa, ours, ratio])
    return markdown_table(["L", "captured under sdpa ms", "GraphedForward ms", "sdpa / GraphedForward"], out)


def report(out: Path, csv, smoke: bool, answers=ANSWERS, rows: int = ROWS) -> None:
    env = csv.env
    where = f"{env['gpu']}, torch {env['torch']}, triton {env['triton']}, {env['date']}"
    note = "**Smoke run: tiny shapes on the CPU; the numbers mean nothing.**\n\n" if smoke else ""
    text = (
        f"# Whole-forward cost at the paper's scale ({where})\n\n{note}{command_line()}Raw rows: "
        "`forward_cost.csv`. Random-weight Qwen3-8B shape (36 layers, 32 / 8 heads, d = 128), bf16, batch 1, "
        "every statistic on every head and layer, no logit statistics.\n\n"
        "## Memory per answer token\n\nExtra peak of `record_forward` over the plain forward's peak "
        "(PyTorch allocations, as the paper counts them), fitted by least squares over the answer lengths: "
        f"the slope per answer token and the intercept. Target: at most {PAPER_KIB_PER_TOKEN:g} KiB per "
        f"answer token (the paper's fit) plus at most {FIXED_TARGET_MIB:g} MiB fixed, at every L; the paper "
        f"stores {PAPER_STORED_KIB:g} KiB of statistics per answer token (five per head and layer, fp32), "
        "we store eight (the row statistics, the lookups with one sink, all fp32) plus 16 reduced column "
        "means per head and layer. The full-columns column is the same forward with "
        "`full_columns=True` (every column vector of every layer kept, the earlier default).\n\n"
    )
    text += memory_table(csv, answers)
    text += (
        f"\n## Where the long-context overhead goes (eager, R = {rows})\n\nWhole forwards: ours with no "
        "statistic (Base: the split layer), then adding the row statistics, the lookups and the column pass; "
        "differences in ms per forward. Per layer: one attention call of the same shape (`do_bench`, "
        "L2 flushed), SDPA over all rows against the split (SDPA on the prompt rows, our kernel on the "
        "answer rows, the join of the two outputs into the layout Transformers reads; before, a "
        "concatenation and a transposed copy).\n\n"
    )
    text += breakdown_table(csv, rows)
    text += (
        '\n## The plain forward in a CUDA graph\n\nCaptured under Transformers\' `"sdpa"`, the forward gets '
        "a dense causal mask (Transformers cannot check for padding while a graph is captured) and SDPA "
        'loses its FlashAttention backend; `GraphedForward` captures it under `"attnstats"`, which hands '
        "SDPA no mask (`is_causal`).\n\n"
    )
    text += capture_table(csv)
    (out / "forward_cost.md").write_text(text)


def extras(dev, model, out: Path, seconds: float, only: str | None = None) -> None:
    """The three sections under one budget (memory first), or ``only`` one of them, then the report."""
    csv = LongCsv(out / "forward_cost.csv", FIELDS)
    deadline = Deadline(seconds)
    start = time.monotonic()
    shapes = dict(answers=ANSWERS, rows=ROWS, memory=MEMORY_LENGTHS, breakdown=BREAKDOWN_LENGTHS)
    shapes = shapes if dev.cuda else SMOKE
    if only in (None, "memory"):
        share = deadline if only else Deadline(0.3 * seconds)
        memory(dev, csv, model, share, shapes["memory"], shapes["answers"])
    if only in (None, "breakdown"):
        part = deadline if only else Deadline(deadline.end - time.monotonic() - 0.15 * seconds)
        breakdown(dev, csv, model, part, shapes["breakdown"], shapes["rows"])
    if dev.cuda and only in (None, "capture"):
        captured_plain(dev, csv, model, deadline)
    csv.close()
    report(out, csv, not dev.cuda, shapes["answers"], shapes["rows"])
    print(f"forward_cost: {time.monotonic() - start:.0f} s", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--budget", type=float, default=150.0)
    ap.add_argument("--report-only", type=Path, help="redraw forward_cost.md from this CSV")
    ap.add_argument("--only", choices=("memory", "breakdown", "capture"), help="run this section alone")
    args = ap.parse_args(argv)
    if args.report_only:
        report(args.out, LoadedCsv(args.report_only, ints=()), False)
        return
    from paper_j_fig1 import Device, build

    dev = Device(not torch.cuda.is_available())
    extras(dev, build(dev, 36), args.out, args.budget, args.only)


if __name__ == "__main__":
    main()
