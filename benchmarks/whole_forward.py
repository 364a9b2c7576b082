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
from _perf import Deadline, LongCsv, markdown_table, parse_args

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


def stats_bytes(fs) -> int:
    """Bytes of the attention statistics tensors in a ForwardStats."""
    total = 0
    for fam in (fs.rows, fs.lookups, fs.columns):
        if fam is None:
            continue
        for v in vars(fam).values():
            if isinstance(v, torch.Tensor):
                total += v.numel() * v.element_size()
    return total


def one_length(csv: LongCsv, name: str, model, length: int) -> None:
    from flashstats_hf import record_forward

    rows = max(1, round(0.3 * length))
    ids = torch.randint(0, 151936, (1, length), device="cuda")
    reps = 3 if length >= 16384 else (5 if length >= 4096 else 10)
    with torch.no_grad():
        base_ms, base_mem = timed(lambda: model.model(input_ids=ids, use_cache=False), reps)
        ours_ms, ours_mem = timed(
            lambda: record_forward(model, ids, response_start=length - rows, logits=False), reps
        )
        fs = record_forward(model, ids, response_start=length - rows, logits=False)
    extra = max(ours_mem - base_mem, 0)
    csv.add(
        model=name,
        L=length,
        R=rows,
        base_ms=f"{base_ms:.2f}",
        ours_ms=f"{ours_ms:.2f}",
        overhead_pct=f"{100 * (ours_ms / base_ms - 1):.2f}",
        extra_peak_kib_per_tok=f"{extra / rows / 1024:.1f}",
        stats_kib_per_tok=f"{stats_bytes(fs) / rows / 1024:.1f}",
    )
    print(
        f"{name} L={length}: base {base_ms:.2f} ms ours {ours_ms:.2f} ms "
        f"(+{100 * (ours_ms / base_ms - 1):.1f}%) extra peak {extra / rows / 1024:.1f} KiB/tok",
        flush=True,
    )
    del fs


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
            model="dense-vs-ours 8B attention x36",
            L=length,
            R=rows,
            base_ms=path,
            ours_ms=f"{ms * layers:.2f}",
            overhead_pct="",
            extra_peak_kib_per_tok=f"{mem / rows / 1024:.1f}",
            stats_kib_per_tok="",
        )
        print(
            f"{path}: {ms * layers:.2f} ms per 36 layers, peak {mem / 2**20:.0f} MiB per layer call",
            flush=True,
        )


def host_cost(csv: LongCsv, name: str, model) -> None:
    """Fixed host cost: wall time of ours minus the plain forward on a 64-token input (GPU work tiny)."""
    from flashstats_hf import record_forward

    ids = torch.randint(0, 151936, (1, 64), device="cuda")
    with torch.no_grad():
        base_ms, _ = timed(lambda: model.model(input_ids=ids, use_cache=False), 20)
        ours_ms, _ = timed(lambda: record_forward(model, ids, response_start=44, logits=False), 20)
    csv.add(
        model=name,
        L=64,
        R=20,
        base_ms=f"{base_ms:.2f}",
        ours_ms=f"{ours_ms:.2f}",
        overhead_pct=f"host cost {ours_ms - base_ms:.2f} ms",
        extra_peak_kib_per_tok="",
        stats_kib_per_tok="",
    )
    print(f"{name} host cost per forward: {ours_ms - base_ms:.2f} ms (plain {base_ms:.2f} ms)", flush=True)


def report(csv: LongCsv, out) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    for name in SHAPES:
        pts = [r for r in csv.rows if r["model"] == name and r["L"] != 64]
        if pts:
            ax1.plot([r["L"] for r in pts], [float(r["overhead_pct"]) for r in pts], marker="o", label=name)
            ax2.plot(
                [r["L"] for r in pts],
                [float(r["extra_peak_kib_per_tok"]) for r in pts],
                marker="o",
                label=name,
            )
    for ax, lab in ((ax1, "time overhead (%)"), (ax2, "extra peak memory (KiB / response token)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("L (tokens), r = 0.3")
        ax.set_ylabel(lab)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "whole_forward.png", dpi=120)
    head = ["model", "L", "R", "plain ms", "ours ms", "overhead %", "extra peak KiB/tok", "stats KiB/tok"]
    body = [[r[f] for f in csv.fields[4:]] for r in csv.rows]
    env = csv.env
    text = f"# Whole forward ({env['gpu']}, torch {env['torch']}, triton {env['triton']}, {env['date']})\n\n"
    (out / "whole_forward.md").write_text(text + markdown_table(head, body))


def main() -> None:
    args = parse_args(__doc__)
    args.out.mkdir(parents=True, exist_ok=True)
    fields = (
        "model",
        "L",
        "R",
        "base_ms",
        "ours_ms",
        "overhead_pct",
        "extra_peak_kib_per_tok",
        "stats_kib_per_tok",
    )
    csv = LongCsv(args.out / "whole_forward.csv", fields)
    deadline = Deadline(args.budget)
    try:
        dense_vs_ours(csv)
    except torch.OutOfMemoryError as err:
        print(f"dense comparison ran out of memory: {str(err)[:200]}")
    for name in ("Qwen3-0.6B", "Qwen3-8B"):
        model = build(name)
        host_cost(csv, name, model)
        for length in (512, 2048) if args.quick else LENGTHS:
            if deadline.over():
                print("budget spent: stopping early")
                break
            one_length(csv, name, model, length)
        del model
        torch.cuda.empty_cache()
    csv.close()
    report(csv, args.out)


if __name__ == "__main__":
    main()
