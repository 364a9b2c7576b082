"""Families benchmark: the whole-forward cost of all statistics on seven model families' shapes.

Random-weight Llama-3.2-1B, Qwen2.5-7B, Qwen3-8B, Qwen3-0.6B, Mistral-7B (sliding window 4096),
Gemma-2-2B (d = 256, soft-cap 50, alternating window 4096) and Gemma-3-1B (d = 256, 5 windowed : 1
global, window 512) shapes; bf16, batch 1, the decoder body only (no LM head, so that every side runs
the same decoder). Two answer regimes: a fixed answer of ``R = 512`` tokens and the stress case
``r = R / L = 0.3``. Everything scores every layer with rows, lookups and columns.

For each point the *plain* candidates run side by side in one process, eager and CUDA-graphed:
``sdpa`` (PyTorch SDPA; for the soft-capped Gemma-2 it drops the cap, so it is a lower bound, not an
exact forward), ``eager`` (Transformers' eager attention, exact for soft-capped layers; Gemma-2 only),
``flex_attention`` (Transformers' FlexAttention path, the soft cap as a score modifier; Gemma-2 only)
and ``attnstats`` (our implementation with no recorder: SDPA on plain layers, the Base kernel on
soft-capped and windowed ones). The reference of a point is the fastest *exact* plain candidate of the
same mode. Ours is ``record_forward`` (eager) and ``GraphedRecorder`` (graphed). The report compares each
of ours with the fastest exact plain forward in *either* mode (a graphed plain forward is not always the
faster one: captured SDPA forwards of the longer inputs ran 1.5-2x slower than eager ones on 2026-12-01).
Extra peak memory is ``max_memory_allocated`` of ours minus that of the reference forward (eager runs;
a graph's pool holds the same tensors), reported against the reference's own peak above the weights.

With ``FAMILIES_BREAKDOWN=1`` each point also times the graphed recorder without the T3 column pass
(``ours_graph_no_columns``) and with no statistic at all (``ours_graph_no_stats``: the recorder's own
plumbing), to show where the extra time goes.

Points run in priority order (the issue's targets first) until ``--budget`` seconds are spent; the CSV
(``families.csv``, long format) and ``families.md`` are written as points finish.
"""

from __future__ import annotations

import os
import time

import torch
from _perf import Deadline, LoadedCsv, LongCsv, command_line, markdown_table, parse_args
from whole_forward import graphed_plain, timed

FAMILIES = {
    "Llama-3.2-1B": ("llama", dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
                     rope_theta=500000.0, tie_word_embeddings=True)),
    "Qwen2.5-7B": ("qwen2", dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                   num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, rope_theta=1e6)),
    "Qwen3-8B": ("qwen3", dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936)),
    "Qwen3-0.6B": ("qwen3", dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                   num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
                   tie_word_embeddings=True)),
    "Mistral-7B": ("mistral", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                   num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, sliding_window=4096)),
    "Gemma-2-2B": ("gemma2", dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, vocab_size=256000,
                   sliding_window=4096, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                   query_pre_attn_scalar=256)),
    "Gemma-3-1B": ("gemma3_text", dict(hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144,
                   sliding_window=512, query_pre_attn_scalar=256)),
}  # fmt: skip
SOFTCAPPED = {"Gemma-2-2B"}

# Tiers of (family, L, regime) in priority order: the targets first, then the rest of the grid.
_SMALL = ("Llama-3.2-1B", "Qwen3-0.6B", "Gemma-2-2B", "Gemma-3-1B")
_LARGE = ("Qwen2.5-7B", "Qwen3-8B", "Mistral-7B")
TIERS = (
    [("Gemma-2-2B", 4096, "R512"), ("Gemma-2-2B", 12288, "R512"), ("Qwen3-8B", 32768, "r0.3"),
     ("Qwen3-0.6B", 32768, "r0.3"), ("Llama-3.2-1B", 16384, "r0.3")],
    [(f, 2048, "R512") for f in (*_SMALL, *_LARGE)],
    [(f, 32768, "R512") for f in _LARGE] + [("Gemma-2-2B", 4096, "r0.3"), ("Gemma-2-2B", 12288, "r0.3")],
    [(f, n, reg) for f in (*_SMALL, *_LARGE) for n in (2048, 8192, 32768) for reg in ("R512", "r0.3")],
)  # fmt: skip


def ordered_points(tiers) -> list[tuple[str, int, str]]:
    """Points tier by tier, grouped by family inside a tier (one model build per group), no repeats."""
    seen: set = set()
    out = []
    for tier in tiers:
        for fam in dict.fromkeys(p[0] for p in tier):
            for p in tier:
                if p[0] == fam and p not in seen:
                    seen.add(p)
                    out.append(p)
    return out


def build(name: str) -> torch.nn.Module:
    """A random-weight model of the named shape in bf16 on the GPU, with the ``attnstats`` attention."""
    from flashstats_hf.attention import register_flashstats
    from transformers import AutoConfig, AutoModelForCausalLM

    kind, shape = FAMILIES[name]
    cfg = AutoConfig.for_model(kind, max_position_embeddings=131072, **shape)
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation=register_flashstats())
    finally:
        torch.set_default_dtype(torch.float32)
    return model.eval()


def warm(name: str) -> None:
    """Compile a family's kernel variants: a two-layer model of its head geometry, plain and recorded."""
    from flashstats_hf import GraphedRecorder, record_forward

    kind, shape = FAMILIES[name]
    small = dict(shape, num_hidden_layers=2)
    if kind == "gemma3_text":
        small["layer_types"] = ["sliding_attention", "full_attention"]
    FAMILIES[name] = (kind, small)
    model = build(name)
    ids = torch.randint(0, 1000, (1, 1024), device="cuda")
    with torch.no_grad():
        model.model(input_ids=ids, use_cache=False)
    record_forward(model, ids, response_start=1024 - 300, logits=False)
    GraphedRecorder(model, max_graphs=1)(ids, response_start=1024 - 300)
    torch.cuda.synchronize()


def rows_of(length: int, regime: str) -> int:
    return 512 if regime == "R512" else round(0.3 * length)


def _plain_candidates(name: str, length: int) -> tuple[str, ...]:
    """Plain implementations timed for a family (eager attention only where it is the exact competitor)."""
    if name in SOFTCAPPED:  # FlexAttention with the soft cap as a score modifier: exact, compiled
        return ("attnstats", "eager", "flex_attention", "sdpa") if length <= 12288 else ("attnstats", "sdpa")
    return ("sdpa", "attnstats") if FAMILIES[name][1].get("sliding_window") else ("sdpa",)


def _time_plain(model, ids, impl: str, graphed: bool, reps: int) -> tuple[float, int]:
    model.set_attn_implementation(impl)
    try:
        if graphed:
            run, graph = graphed_plain(model, ids)
            ms, _ = timed(run, reps)
            del run, graph
            return ms, 0
        with torch.no_grad():
            return timed(lambda: model.model(input_ids=ids, use_cache=False), reps)
    finally:
        from flashstats_hf.attention import register_flashstats

        model.set_attn_implementation(register_flashstats())


def one_point(csv: LongCsv, name: str, model, length: int, regime: str, graphs: bool) -> None:
    """Plain candidates and ours, eager (time, peak) and graphed (time), at one (L, R)."""
    from flashstats_hf import GraphedRecorder, record_forward

    rows = rows_of(length, regime)
    ids = torch.randint(0, FAMILIES[name][1]["vocab_size"], (1, length), device=model.device)
    reps = 2 if length >= 16384 else (3 if length >= 8192 else 5)
    t0 = time.perf_counter()
    key = dict(model=name, L=length, R=rows, regime=regime)

    def add(mode: str, ms: float, peak: int | None = None) -> None:
        csv.add(**key, mode=mode, ms=f"{ms:.3f}", peak_mib="" if peak is None else f"{peak / 2**20:.1f}")

    for impl in _plain_candidates(name, length):
        try:
            ms, peak = _time_plain(model, ids, impl, False, reps)
        except Exception as err:  # noqa: BLE001 - a candidate the installed versions cannot run is reported
            print(f"{name} L={length}: plain {impl} failed: {str(err)[:300]}", flush=True)
            continue
        add(f"plain_{impl}_eager", ms, peak)
        # Transformers' eager mask builder copies a host scalar to the GPU, which a capture refuses; the
        # compiled FlexAttention forward is timed eagerly only
        if graphs and impl not in ("eager", "flex_attention"):
            add(f"plain_{impl}_graph", _time_plain(model, ids, impl, True, reps)[0])
    ours = lambda: record_forward(model, ids, response_start=length - rows, logits=False)  # noqa: E731
    ms, peak = timed(ours, reps)
    add("ours_eager", ms, peak)
    if graphs:
        rec = GraphedRecorder(model, max_graphs=1)
        call = lambda: rec(ids, response_start=length - rows)  # noqa: E731
        add("ours_graph", timed(call, reps)[0])
        del rec, call
        if os.environ.get("FAMILIES_BREAKDOWN"):  # the same forward without T3, then without any statistic
            from dataclasses import replace

            from flashstats_hf import DEFAULT_REQUEST
            from flashstats_kernels import StatsRequest

            for mode, req in (
                ("ours_graph_no_columns", replace(DEFAULT_REQUEST, columns=False)),
                ("ours_graph_no_stats", StatsRequest(rows=False, lookups=False, columns=False)),
            ):
                try:
                    part = GraphedRecorder(model, max_graphs=1, request=req)
                    add(mode, timed(lambda p=part: p(ids, response_start=length - rows), reps)[0])
                    del part
                except Exception as err:  # noqa: BLE001 - reported, the point's other rows stand
                    print(f"{name} L={length}: {mode} failed: {str(err)[:300]}", flush=True)
    torch.cuda.empty_cache()
    print(f"{name} L={length} R={rows}: {time.perf_counter() - t0:.1f}s", flush=True)


def report(csv, out) -> None:
    """``families.md``: per point, the reference, ours and the ratios, eager and graphed."""
    at: dict = {}
    for r in csv.rows:
        at.setdefault((r["model"], int(r["L"]), r["regime"]), {})[r["mode"]] = r
    head = ["model", "L", "R", "mode", "reference (fastest exact plain)", "ref ms", "ours ms", "ours +%",
            "SDPA ms (lower bound)", "ours vs SDPA +%", "ref peak MiB", "extra peak MiB",
            "extra / ref peak"]  # fmt: skip
    table = []
    for (name, length, _regime), m in at.items():
        exact = {k: float(v["ms"]) for k, v in m.items() if k.startswith("plain_")}
        if name in SOFTCAPPED:  # SDPA drops the soft cap: a lower bound, not an exact forward
            exact = {k: v for k, v in exact.items() if not k.startswith("plain_sdpa_")}
        for mode in ("graph", "eager"):
            if not exact or f"ours_{mode}" not in m:
                continue
            ref = min(exact, key=exact.get)
            ours = float(m[f"ours_{mode}"]["ms"])
            sdpa = m.get(f"plain_sdpa_{mode}", {}).get("ms", "")
            ref_name = ref.removeprefix("plain_")
            row = [name, length, m[f"ours_{mode}"]["R"], mode, ref_name, f"{exact[ref]:.2f}",
                   f"{ours:.2f}", f"{100 * (ours / exact[ref] - 1):+.1f}", sdpa,
                   f"{100 * (ours / float(sdpa) - 1):+.1f}" if sdpa else "", "", "", ""]  # fmt: skip
            ref_eager = m.get(ref.replace("_graph", "_eager"), {})
            if ref_eager.get("peak_mib") and m["ours_eager"].get("peak_mib"):
                rp, op = float(ref_eager["peak_mib"]), float(m["ours_eager"]["peak_mib"])
                row[-3:] = [f"{rp:.0f}", f"{op - rp:.0f}", f"{(op - rp) / rp:.1%}"]
            table.append(row)
    env = csv.env
    text = (
        f"# Families ({env['gpu']}, torch {env['torch']}, triton {env['triton']}, {env['date']})\n\n"
        + command_line()
    )
    text += (
        "Random weights, bf16, batch 1, decoder body, every layer scored with rows, lookups and columns.\n\n"
    )
    text += markdown_table(head, table) + "\n## Every measurement\n\n"
    raw = [[r["model"], r["L"], r["R"], r["mode"], r["ms"], r["peak_mib"]] for r in csv.rows]
    (out / "families.md").write_text(
        text + markdown_table(["model", "L", "R", "mode", "ms", "peak MiB"], raw)
    )


def main() -> None:
    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    csv = LongCsv(args.out / "families.csv", ("model", "L", "R", "regime", "mode", "ms", "peak_mib"))
    deadline = Deadline(args.budget)
    quick = [[("Qwen3-0.6B", 2048, "R512"), ("Gemma-2-2B", 2048, "R512")]]
    name, model = None, None
    points = ordered_points(quick if args.quick else TIERS)
    start = int(os.environ.get("FAMILIES_FROM", "0"))  # a second device call resumes where one stopped
    count = int(os.environ.get("FAMILIES_COUNT", str(len(points))))  # at most this many points
    for fam, length, regime in points[start : start + count]:
        if deadline.over():
            print("budget spent: stopping early", flush=True)
            break
        if fam != name:
            del model
            torch.cuda.empty_cache()
            t0 = time.perf_counter()
            name, model = fam, build(fam)
            print(f"{fam}: built in {time.perf_counter() - t0:.1f}s", flush=True)
        try:
            one_point(csv, name, model, length, regime, graphs=length < 32768)
        except torch.OutOfMemoryError as err:
            print(f"{name} L={length} {regime}: out of memory ({str(err)[:120]})", flush=True)
        report(csv, args.out)
    csv.close()
    report(csv, args.out)


if __name__ == "__main__":
    import sys
    from pathlib import Path

    if len(sys.argv) == 3 and sys.argv[1] == "--report":  # redraw from a CSV: --report results/families.csv
        report(LoadedCsv(Path(sys.argv[2]), ints=("L", "R")), Path(sys.argv[2]).parent)
    else:
        main()
