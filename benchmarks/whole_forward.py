"""Whole-forward overhead and memory of all statistics on every head and layer (paper Figures 1, 5-6).

Random-weight Qwen3-8B and Qwen3-0.6B shapes (timing does not depend on weight values), bf16 on the GPU,
batch 1, r = R / L = 0.3. For each L: the plain forward of the decoder (SDPA attention, no statistics)
against ``flashstats_hf.record_forward`` with rows, lookups and columns on every layer (logit statistics
off, so both sides run the same decoder). Reports the time ratio, the peak memory above the plain
forward per response token (``max_memory_allocated`` after ``reset_peak_memory_stats``, Appendix I), the
bytes of statistics returned per response token, and the fixed host cost per forward (wall time of a
tiny forward). Also ours against the dense path on one synthetic 785-response-token / 7.2K-token input
with the 8B attention shape (36 layers of 32/8 heads, d = 128).

Writes ``whole_forward.csv`` (long format), ``whole_forward.md`` and ``whole_forward.png``.
"""

from __future__ import annotations

import statistics
import time

import torch
from _perf import Deadline, LongCsv, command_line, markdown_table, parse_args

SHAPES = {
    "Qwen3-8B": dict(
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    ),
    "Qwen3-0.6B": dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        tie_word_embeddings=True,
    ),
}
LENGTHS = (512, 1024, 2048, 4096, 8192, 16384, 32768)


def build(name: str) -> torch.nn.Module:
    """A random-weight Qwen3 model of the named shape, initialised on the GPU in bf16."""
    from flashstats_hf.attention import register_flashstats
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        vocab_size=151936, head_dim=128, max_position_embeddings=131072, rope_theta=1e6, **SHAPES[name]
    )
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = Qwen3ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(torch.float32)
    model.eval()
    model.set_attn_implementation(register_flashstats())
    return model


def timed(fn, reps: int) -> tuple[float, float]:
    """(median GPU-synchronised wall ms, peak bytes above the allocation at the start) of ``fn``."""
    fn()
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        del out
    return statistics.median(times), torch.cuda.max_memory_allocated() - start


def host_ms(fn, reps: int) -> float:
    """Median host time of one call (until it returns, the GPU still running): the fixed host cost."""
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1e3)
        del out
    torch.cuda.synchronize()
    return statistics.median(times)


def stats_bytes(stats) -> int:
    """Bytes of the attention statistics tensors (rows, lookups, columns, reduced columns) of a result."""
    total = 0
    for fam in (stats.rows, stats.lookups, stats.columns, getattr(stats, "column_topk", None)):
        for v in vars(fam).values() if fam is not None else ():
            if isinstance(v, torch.Tensor):
                total += v.numel() * v.element_size()
    return total


def graphed_plain(model, ids: torch.Tensor):
    """The plain decoder forward captured in a CUDA graph (the graphed baseline): (run, graph).

    Under ``"attnstats"`` this is `flashstats_hf.GraphedForward` (SDPA with ``is_causal``, no mask). Under
    another implementation the forward is captured as it is; for ``"sdpa"`` Transformers then builds the
    dense ``[1, 1, L, L]`` causal mask (it cannot look for padding while capturing), and SDPA runs without
    its FlashAttention backend.
    """
    from flashstats_hf import ATTN_IMPLEMENTATION, GraphedForward
    from flashstats_hf.graphs import unpacked_positions

    if model.config._attn_implementation == ATTN_IMPLEMENTATION:
        graphed = GraphedForward(model, max_graphs=1)
        graphed(ids)  # capture
        return (lambda: graphed(ids)), graphed
    static = ids.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(side), unpacked_positions():
        model.model(input_ids=static, use_cache=False)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph), unpacked_positions():
        model.model(input_ids=static, use_cache=False)

    def run():
        static.copy_(ids)
        graph.replay()

    return run, graph


class _Rows:
    """Adds the rows of one (model, L) point to the CSV."""

    def __init__(self, csv: LongCsv, name: str, length: int, rows: int) -> None:
        self.csv, self.key = csv, dict(model=name, L=length, R=rows)
        self.rows = rows

    def add(self, mode: str, ms: float, *, mem: float | None = None, nbytes: int | None = None, host=None):
        self.csv.add(
            **self.key, mode=mode, ms=f"{ms:.3f}", host_ms="" if host is None else f"{host:.2f}",
            extra_peak_kib_per_tok="" if mem is None else f"{max(mem, 0) / self.rows / 1024:.2f}",
            stats_kib_per_tok="" if nbytes is None else f"{nbytes / self.rows / 1024:.2f}",
        )  # fmt: skip


def _graph_modes(out: _Rows, model, ids, rows: int, reps: int, base_mem: int) -> float:
    """Graphed modes: per-token and pooled (all families; eager peak memory too), and per-token
    without columns (rows + lookups, the <=T2 tiers); the pooled ms back."""
    from flashstats_hf.graphs import GraphedRecorder, recorded_forward, shape_plan
    from flashstats_kernels import StatsRequest

    length = ids.shape[1]
    g_ms = 0.0
    no_columns = StatsRequest(rows=True, lookups=True, columns=False, sink_positions=(0,))
    for mode, pooled, request in (
        ("per_token", False, None),
        ("pooled", True, None),
        ("t2", False, no_columns),
    ):
        rec = GraphedRecorder(model, pooled=pooled, request=request, max_graphs=1)
        if mode != "t2":  # the captured work run eagerly: in-layer memory
            plan = shape_plan(rec.layers, rec.request, length, rows, ids.device)
            eager = lambda p=plan, pl=pooled, ly=rec.layers: recorded_forward(model, ids, p, ly, pooled=pl)  # noqa: E731
            run_ms, run_mem = timed(eager, 1)
            out.add(f"{mode}_eager_mem", run_ms, mem=run_mem - base_mem)
        call = lambda r=rec: r(ids, response_start=length - rows)  # noqa: E731
        ms, _ = timed(call, reps)
        host = host_ms(call, 5) if length <= 2048 else None
        out.add(f"ours_graph_{mode}", ms, nbytes=stats_bytes(call()), host=host)
        g_ms = ms if pooled else g_ms
        del rec, call
    return g_ms


def one_length(csv: LongCsv, name: str, model, length: int) -> None:
    """Eager and graphed, plain and recorded forwards at one length; memory of per-token and pooled modes."""
    from flashstats_hf import record_forward

    rows = max(1, round(0.3 * length)) if length > 64 else 20
    ids = torch.randint(0, 151936, (1, length), device="cuda")
    reps = 2 if length >= 32768 else (3 if length >= 8192 else (5 if length >= 2048 else 20))
    out = _Rows(csv, name, length, rows)
    with torch.no_grad():
        plain = lambda: model.model(input_ids=ids, use_cache=False)  # noqa: E731
        base_ms, base_mem = timed(plain, reps)
        small = length <= 2048  # host times only where they are the point (tiny GPU work)
        out.add("plain_eager", base_ms, host=host_ms(plain, 5) if small else None)
        ours = lambda: record_forward(model, ids, response_start=length - rows, logits=False)  # noqa: E731
        ours_ms, ours_mem = timed(ours, reps)
        out.add(
            "ours_eager", ours_ms, mem=ours_mem - base_mem, nbytes=stats_bytes(ours()), host=host_ms(ours, 5)
        )
        g_ms = _graph_modes(out, model, ids, rows, reps, base_mem)
        run, graph = graphed_plain(model, ids)
        gb_ms, _ = timed(run, reps)
        out.add("plain_graph", gb_ms, host=host_ms(run, 5) if small else None)
        del run, graph
    torch.cuda.empty_cache()
    print(
        f"{name} L={length}: plain {base_ms:.2f} ms, ours {ours_ms:.2f} ms "
        f"(+{100 * (ours_ms / base_ms - 1):.1f}%); "
        f"graphs: plain {gb_ms:.2f} ms, ours pooled {g_ms:.2f} ms (+{100 * (g_ms / gb_ms - 1):.1f}%)",
        flush=True,
    )


def dense_vs_ours(csv: LongCsv) -> None:
    """One synthetic 7.2K-token input with 785 response tokens on the 8B attention shape, 36 layers."""
    from flashstats_kernels import StatsRequest, response_attention
    from flashstats_kernels.ops.dense import dense_statistics

    length, rows, layers = 7200, 785, 36
    req = StatsRequest(rows=True, lookups=True, columns=True, sink_positions=(0,))
    q = torch.randn(1, 32, rows, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 8, length, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 8, length, 128, device="cuda", dtype=torch.bfloat16)
    for path, fn in (
        ("ours", lambda: response_attention(q, k, v, request=req, backend="triton")),
        ("dense", lambda: dense_statistics(q, k, v, request=req)),
    ):
        ms, mem = timed(fn, 10)
        csv.add(
            model="Qwen3-8B attention x36",
            L=length,
            R=rows,
            mode=f"{path}_all_stats",
            ms=f"{ms * layers:.2f}",
            host_ms="",
            extra_peak_kib_per_tok=f"{mem / rows / 1024:.1f}",
            stats_kib_per_tok="",
        )
        print(
            f"{path}: {ms * layers:.2f} ms per 36 layers, peak {mem / 2**20:.0f} MiB per layer call",
            flush=True,
        )


def report(csv: LongCsv, out) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    at = {(r["model"], r["L"], r["mode"]): r for r in csv.rows}

    def g(name, length, mode, key):
        return at.get((name, length, mode), {}).get(key, "")

    def f(name, length, mode, key="ms"):
        return float(g(name, length, mode, key) or "nan")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    table = []
    for name in SHAPES:
        lengths = sorted(L for m, L, mode in at if m == name and mode == "plain_eager")
        ov_e = [100 * (f(name, n, "ours_eager") / f(name, n, "plain_eager") - 1) for n in lengths]
        ov_g = [100 * (f(name, n, "ours_graph_per_token") / f(name, n, "plain_graph") - 1) for n in lengths]
        ov_p = [100 * (f(name, n, "ours_graph_pooled") / f(name, n, "plain_graph") - 1) for n in lengths]
        ov_2 = [100 * (f(name, n, "ours_graph_t2") / f(name, n, "plain_graph") - 1) for n in lengths]
        mem_t = [f(name, n, "per_token_eager_mem", "extra_peak_kib_per_tok") for n in lengths]
        mem_p = [f(name, n, "pooled_eager_mem", "extra_peak_kib_per_tok") for n in lengths]
        for i, n in enumerate(lengths):
            r = at[(name, n, "plain_eager")]
            table.append([name, n, r["R"], r["ms"], f"{ov_e[i]:.1f}", g(name, n, "plain_graph", "ms"),
                          f"{ov_g[i]:.1f}", f"{ov_p[i]:.1f}", f"{ov_2[i]:.1f}",
                          at[(name, n, "ours_eager")]["host_ms"],
                          g(name, n, "ours_graph_per_token", "host_ms"),
                          at[(name, n, "ours_eager")]["stats_kib_per_tok"], f"{mem_t[i]:.1f}",
                          f"{mem_p[i]:.1f}",
                          g(name, n, "ours_graph_pooled", "stats_kib_per_tok")])  # fmt: skip
        ax1.plot(lengths, ov_e, marker="o", ls="--", label=f"{name} eager")
        ax1.plot(lengths, ov_g, marker="o", label=f"{name} CUDA graph")
        ax1.plot(lengths, ov_2, marker="x", ls=":", label=f"{name} CUDA graph, no columns")
        ax2.plot(lengths, mem_t, marker="o", label=f"{name} per-token")
        ax2.plot(lengths, mem_p, marker="o", ls="--", label=f"{name} pooled")
    for ax, lab in ((ax1, "time overhead (%)"), (ax2, "extra peak memory (KiB / response token)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("L (tokens), r = 0.3")
        ax.set_ylabel(lab)
        ax.legend(fontsize=7)
    ax1.set_yscale("symlog", linthresh=10)
    fig.tight_layout()
    fig.savefig(out / "whole_forward.png", dpi=120)
    head = ["model", "L", "R", "plain eager ms", "ours eager +%", "plain graph ms", "ours graph +%",
            "pooled graph +%", "no-columns graph +%", "host ms eager", "host ms graph", "stats KiB/tok",
            "extra peak KiB/tok",
            "pooled extra peak KiB/tok", "pooled stats KiB/tok"]  # fmt: skip
    dense = [
        [r["mode"], r["L"], r["R"], r["ms"], r["extra_peak_kib_per_tok"]]
        for r in csv.rows
        if "all_stats" in r["mode"]
    ]
    env = csv.env
    text = f"# Whole forward ({env['gpu']}, torch {env['torch']}, triton {env['triton']}, {env['date']})\n\n"
    text += (
        command_line()
        + markdown_table(head, table)
        + "\n## Dense path vs ours (8B attention shape, 36 layers)\n\n"
    )
    text += markdown_table(["path", "L", "R", "ms per forward", "peak KiB per response token"], dense)
    (out / "whole_forward.md").write_text(text)


def main() -> None:
    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    fields = ("model", "L", "R", "mode", "ms", "host_ms", "extra_peak_kib_per_tok", "stats_kib_per_tok")
    csv = LongCsv(args.out / "whole_forward.csv", fields)
    deadline = Deadline(args.budget)
    try:
        dense_vs_ours(csv)
    except torch.OutOfMemoryError as err:
        print(f"dense comparison ran out of memory: {str(err)[:200]}")
    import os

    only = os.environ.get("WHOLE_LENGTHS")  # e.g. "64,2048,32768": a subset of the lengths
    lengths = tuple(int(x) for x in only.split(",")) if only else (64, *LENGTHS)
    for name in ("Qwen3-0.6B", "Qwen3-8B"):
        model = build(name)
        for length in (64, 512, 2048) if args.quick else lengths:
            if deadline.over():
                print("budget spent: stopping early")
                break
            one_length(csv, name, model, length)
        del model
        torch.cuda.empty_cache()
    csv.close()
    report(csv, args.out)


if __name__ == "__main__":
    import sys

    if (
        len(sys.argv) == 3 and sys.argv[1] == "--report"
    ):  # redraw from a CSV: --report results/whole_forward.csv
        from pathlib import Path

        from _perf import LoadedCsv

        report(LoadedCsv(Path(sys.argv[2])), Path(sys.argv[2]).parent)
    else:
        main()
