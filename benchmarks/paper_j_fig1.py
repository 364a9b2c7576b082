"""The paper's Appendix J table and Figure 1 curve on Qwen3-8B shapes, in one budgeted GPU run.

**Appendix J, one attention layer** (32 query / 8 KV heads, d = 128, bf16; Q, K, V allocated before each
call). Providers, each returning what a detector needs from the layer:

- ``plain``: SDPA over all L rows, no statistics (the layer without features);
- ``ours``: SDPA on the P prompt rows, `response_attention` with every statistic (rows, lookups, column
  sums: the request of ``record_forward``) on the R response rows, the two outputs concatenated;
- ``dense``: the paper's Dense: the SDPA output, then the response block's weights recomputed for all
  heads at once (fp32 softmax cast to bf16) and every statistic reduced in PyTorch (`dense_statistics`);
- ``output_attentions``: Transformers' eager attention, which returns the layer's full L x L weights (what
  ``output_attentions=True`` keeps for every layer until the forward returns). No statistic is reduced
  from them here, so its time is a lower bound of that path. Skipped where the map does not fit.

Median time per call (``triton.testing.do_bench``) and extra peak memory (``max_memory_allocated`` above
the allocation before the call, the call's outputs included).

**Figure 1, whole forward**: a random-weight Qwen3-8B-shaped model (bf16, batch 1, the decoder body, no
LM head on either side) with ``--layers`` identical decoder layers (default 36, as the real model; fewer
keep the ratio of the GPU work, which is per layer, and save device time, but give the eager forward's
fixed host cost per forward more weight), an answer of ``--answer`` tokens (512) at every L.
Plain: Transformers' SDPA forward without features, eager and CUDA-graphed. Ours: ``record_forward``
with every statistic on every head and layer (eager: the paper's setting) and ``GraphedRecorder``
(graphed). Overheads: ours eager against plain eager; ours graphed against the faster plain forward.

The graphed plain forward is `flashstats_hf.GraphedForward` (``"attnstats"``: SDPA with ``is_causal``); a
capture under ``"sdpa"`` would make Transformers build a dense L x L mask (see `forward_cost.py`).

Points run in priority order (the curve's endpoints first) while ``--budget`` seconds last; a point
whose estimated cost exceeds what is left is skipped and listed. ``--j-csv`` redraws the Appendix J
table from an earlier run's ``paper_j.csv`` instead of measuring it again (the report says so);
``--extras SECONDS`` then runs `forward_cost.py`'s sections on the same model (``forward_cost.md``).
Writes ``paper_j.csv``, ``paper_fig1.csv`` (long format, with date, GPU and versions), ``paper_j_fig1.md`` and
``paper_fig1.png`` under ``--out``. ``--smoke`` runs tiny shapes on the CPU (no CUDA graphs) to check
the script.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from _perf import Deadline, LoadedCsv, LongCsv, command_line, markdown_table

PAPER_FIG1 = {2048: 16.0, 35840: 1.4}
"""Overheads the paper reports for Qwen3-8B (H100 NVL, real inputs, eager): 16 % at 2K, 1.4 % at 35K."""
J_POINTS = ((1, 1024, 256), (8, 1024, 256), (1, 4096, 512), (1, 8192, 512), (1, 16384, 512), (1, 32768, 512))
FIG1_LENGTHS = (2048, 35840, 8192, 32768, 4096, 16384)  # priority order: the curve's endpoints first
SMOKE = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             vocab_size=101)  # fmt: skip
OA_BYTES = 10
"""Bytes per weight at the peak of eager attention: bf16 scores, masked sum, fp32 softmax, weights."""


class Device:
    """Timing and peak memory on CUDA, or wall time alone on the CPU (``--smoke``)."""

    def __init__(self, smoke: bool) -> None:
        self.cuda = not smoke
        self.type = "cuda" if self.cuda else "cpu"
        self.dtype = torch.bfloat16 if self.cuda else torch.float32

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def free_bytes(self) -> int:
        return torch.cuda.mem_get_info()[0] if self.cuda else 1 << 40

    def peak(self, fn: Callable[[], object]) -> float | None:
        """Extra peak MiB of one call above the allocation before it (None on the CPU)."""
        if not self.cuda:
            return None
        self.sync()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = fn()
        self.sync()
        del out
        return (torch.cuda.max_memory_allocated() - start) / 2**20

    def wall_ms(self, fn: Callable[[], object], reps: int) -> float:
        """Median synchronised wall time of ``fn`` after one warm-up call (host time included)."""
        fn()
        times = []
        for _ in range(reps):
            self.sync()
            t0 = time.perf_counter()
            out = fn()
            self.sync()
            times.append((time.perf_counter() - t0) * 1e3)
            del out
        return statistics.median(times)

    def kernel_ms(self, fn: Callable[[], object]) -> float:
        """Median time of one layer call (``do_bench`` on CUDA, L2 flushed between calls)."""
        if not self.cuda:
            return self.wall_ms(fn, 3)
        from _perf import bench_ms

        return bench_ms(fn, rep=100, warmup=20)


def _layer_providers(dev: Device, batch: int, length: int, rows: int, d: int, heads: tuple[int, int]):
    """The four providers of one (B, L, R) layer call, and why any of them cannot run (name -> reason)."""
    import torch.nn.functional as F
    from flashstats_hf import DEFAULT_REQUEST
    from flashstats_kernels import dense_statistics, response_attention
    from transformers.models.qwen3.modeling_qwen3 import eager_attention_forward

    hq, hkv = heads
    g = torch.Generator(device=dev.type).manual_seed(length + batch)
    q, k, v = (
        torch.randn(batch, h, length, d, generator=g, device=dev.type, dtype=dev.dtype)
        for h in (hq, hkv, hkv)
    )
    p = length - rows

    def sdpa(qq, kk, vv):
        return F.scaled_dot_product_attention(qq, kk, vv, is_causal=True, enable_gqa=True)

    def ours():
        res = response_attention(q[:, :, p:], k, v, request=DEFAULT_REQUEST)
        return torch.cat([sdpa(q[:, :, :p], k[:, :, :p], v[:, :, :p]), res.out], 2), res

    def dense():
        return sdpa(q, k, v), dense_statistics(q[:, :, p:], k, v, request=DEFAULT_REQUEST)

    providers: dict[str, Callable[[], object]] = {
        "plain": lambda: sdpa(q, k, v),
        "ours": ours,
        "dense": dense,
    }
    skipped: dict[str, str] = {}
    need = batch * hq * length * length * OA_BYTES
    if need > 0.85 * dev.free_bytes():
        skipped["output_attentions"] = f"the L x L map needs about {need / 2**30:.0f} GiB at its peak"
    else:
        module = argparse.Namespace(num_key_value_groups=hq // hkv, training=False)
        mask = torch.full((length, length), torch.finfo(dev.dtype).min, device=dev.type, dtype=dev.dtype)
        mask = mask.triu(1)[None, None]  # Transformers' additive causal mask, built once per forward
        providers["output_attentions"] = lambda: eager_attention_forward(module, q, k, v, mask, d**-0.5)
    return providers, skipped


def _gap(ours, dense) -> str:
    """The statistic where dense differs most from ours: ``mean |dense - ours| / mean |ours|``, in %."""
    gaps = {}
    for fam in ("rows", "lookups", "columns"):
        a, b = getattr(ours, fam), getattr(dense, fam)
        for name, x in vars(a).items():
            x, y = x.double(), getattr(b, name).double()
            gaps[name] = float((y - x).abs().mean() / x.abs().mean().clamp_min(1e-30))
    worst = max(gaps, key=gaps.__getitem__)
    return f"{worst} {100 * gaps[worst]:.3g}%"


def appendix_j(dev: Device, csv: LongCsv, deadline: Deadline, points, d: int, heads) -> list[str]:
    """Every provider at every point (while the budget lasts); the skipped points and providers back."""
    notes = []
    for batch, length, rows in points:
        if deadline.over():
            notes.append(f"B={batch} L={length} R={rows}: not run (budget spent)")
            continue
        providers, skipped = _layer_providers(dev, batch, length, rows, d, heads)
        notes += [f"B={batch} L={length} R={rows}: {name} skipped ({why})" for name, why in skipped.items()]
        gap = _gap(providers["ours"]()[1], providers["dense"]()[1])
        for name, fn in providers.items():
            try:
                ms, mib = dev.kernel_ms(fn), dev.peak(fn)
            except torch.OutOfMemoryError:
                notes.append(f"B={batch} L={length} R={rows}: {name} ran out of memory")
                torch.cuda.empty_cache()
                continue
            peak = "" if mib is None else f"{mib:.1f}"
            csv.add(B=batch, L=length, R=rows, provider=name, ms=f"{ms:.4f}", extra_peak_mib=peak,
                    gap=gap if name == "dense" else "")  # fmt: skip
        del providers
        if dev.cuda:
            torch.cuda.empty_cache()
        print(f"J: B={batch} L={length} R={rows} done", flush=True)
    return notes


def build(dev: Device, layers: int) -> torch.nn.Module:
    """A random-weight Qwen3 model with ``attnstats``: the 8B shape on CUDA, a tiny one with ``--smoke``."""
    import families
    from flashstats_hf.attention import register_flashstats
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if dev.cuda:
        kind, shape = families.FAMILIES["Qwen3-8B"]
        families.FAMILIES["Qwen3-8B"] = (kind, dict(shape, num_hidden_layers=layers))
        return families.build("Qwen3-8B")
    model = Qwen3ForCausalLM(Qwen3Config(**SMOKE, num_hidden_layers=layers)).eval()
    model.set_attn_implementation(register_flashstats())
    return model


def _work(length: int) -> float:
    """FLOPs of one Qwen3-8B-shaped layer at length L: projections and MLP, plus causal attention."""
    return 4.4e8 * length + 8192.0 * length * length


def fig1_point(dev: Device, csv: LongCsv, model, length: int, rows: int, reps: int) -> float:
    """Plain and ours at one length, eager and (on CUDA) graphed; the plain eager ms back."""
    from flashstats_hf import GraphedRecorder, record_forward
    from flashstats_hf.attention import register_flashstats

    ids = torch.randint(0, model.config.vocab_size, (1, length), device=dev.type)
    key = dict(layers=model.config.num_hidden_layers, L=length, R=rows)

    def add(mode: str, ms: float, mib: float | None = None) -> None:
        csv.add(**key, mode=mode, ms=f"{ms:.3f}", extra_peak_mib="" if mib is None else f"{mib:.1f}")

    model.set_attn_implementation("sdpa")  # Transformers' own SDPA forward: the forward without features
    try:
        with torch.no_grad():
            plain = lambda: model.model(input_ids=ids, use_cache=False)  # noqa: E731
            plain_ms = dev.wall_ms(plain, reps)
            add("plain_eager", plain_ms, dev.peak(plain))
        if dev.cuda:
            from whole_forward import graphed_plain

            run, graph = graphed_plain(model, ids)
            add("plain_graph", dev.wall_ms(run, reps))
            del run, graph
    finally:
        model.set_attn_implementation(register_flashstats())
    ours = lambda: record_forward(model, ids, response_start=length - rows, logits=False)  # noqa: E731
    add("ours_eager", dev.wall_ms(ours, reps), dev.peak(ours))
    if dev.cuda:
        rec = GraphedRecorder(model, max_graphs=1)
        call = lambda: rec(ids, response_start=length - rows)  # noqa: E731
        add("ours_graph", dev.wall_ms(call, reps))
        del rec, call
        torch.cuda.empty_cache()
    return plain_ms


def figure1(dev: Device, csv: LongCsv, deadline: Deadline, model, lengths, rows: int) -> list[str]:
    """The points in order while the budget lasts.

    A point runs ``4 reps + 11`` forwards (warm-ups, graph captures, memory runs); its cost is
    estimated from the last point's plain forward scaled by `_work`.
    """
    notes, last = [], None  # last: (length, plain eager ms)
    for length in lengths:
        reps = 2 if length >= 16384 else 4
        left = deadline.end - time.monotonic()
        guess = 0.0 if last is None else (4 * reps + 11) * last[1] / 1e3 * _work(length) / _work(last[0])
        if left <= 0 or guess > left:
            notes.append(
                f"L={length}: not run (estimated {guess:.0f} s, {max(left, 0):.0f} s of budget left)"
            )
            continue
        t0 = time.monotonic()
        last = (length, fig1_point(dev, csv, model, length, rows, reps))
        print(f"Figure 1: L={length} R={rows} in {time.monotonic() - t0:.1f} s", flush=True)
    return notes


def _pct(num: str, den: str) -> str:
    if not num or not den:
        return ""
    return f"{100 * (float(num) / float(den) - 1):+.1f}"


def j_table(csv: LongCsv) -> str:
    """Markdown of Appendix J: per point, each provider's time and peak, ours against dense."""
    by: dict[tuple, dict] = {}
    for r in csv.rows:
        by.setdefault((int(r["B"]), int(r["L"]), int(r["R"])), {})[r["provider"]] = r
    head = [
        "B", "L", "R", "plain ms", "ours ms", "dense ms", "output_attentions ms", "ours / dense",
        "ours MiB", "dense MiB", "output_attentions MiB", "36 layers of output_attentions GiB",
        "dense vs ours, largest gap",
    ]  # fmt: skip
    rows = []
    for (b, length, r), got in sorted(by.items()):
        ms = {n: got[n]["ms"] if n in got else "" for n in ("plain", "ours", "dense", "output_attentions")}
        mib = {
            n: got[n]["extra_peak_mib"] if n in got else "" for n in ("ours", "dense", "output_attentions")
        }
        ratio = f"{float(ms['ours']) / float(ms['dense']):.2f}" if ms["ours"] and ms["dense"] else ""
        held = 36 * b * 32 * length * length * 2 / 2**30  # bf16 maps that output_attentions keeps
        gap = got["dense"].get("gap", "") if "dense" in got else ""
        rows.append([b, length, r, *ms.values(), ratio, *mib.values(), f"{held:.0f}", gap])
    return markdown_table(head, rows)


def fig1_table(csv: LongCsv) -> tuple[str, list[tuple[int, float, float]]]:
    """Markdown of Figure 1 and its curve points ``(L, eager %, graphed %)``."""
    by: dict[int, dict] = {}
    for r in csv.rows:
        by.setdefault(int(r["L"]), {})[r["mode"]] = r
    head = [
        "layers", "L", "R", "plain eager ms", "ours eager ms", "ours eager +%", "plain graph ms",
        "ours graph ms", "ours graph +% (vs faster plain)", "ours eager extra peak MiB", "paper +%",
    ]  # fmt: skip
    rows, curve = [], []
    for length, got in sorted(by.items()):
        ms = {
            m: got[m]["ms"] if m in got else ""
            for m in ("plain_eager", "ours_eager", "plain_graph", "ours_graph")
        }
        best = min(float(ms[m]) for m in ("plain_eager", "plain_graph") if ms[m])
        graphed = f"{100 * (float(ms['ours_graph']) / best - 1):+.1f}" if ms["ours_graph"] else ""
        eager = _pct(ms["ours_eager"], ms["plain_eager"])
        mib = [got[m]["extra_peak_mib"] for m in ("ours_eager", "plain_eager")]
        extra = f"{float(mib[0]) - float(mib[1]):.1f}" if all(mib) else ""
        paper = f"+{PAPER_FIG1[length]}" if length in PAPER_FIG1 else ""
        first = got["plain_eager"]
        rows.append([
            first["layers"], length, first["R"], ms["plain_eager"], ms["ours_eager"], eager,
            ms["plain_graph"], ms["ours_graph"], graphed, extra, paper,
        ])  # fmt: skip
        curve.append((length, float(eager or "nan"), float(graphed or "nan")))
    return markdown_table(head, rows), curve


def plot(curve: list[tuple[int, float, float]], rows: int, layers: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs = [c[0] for c in curve]
    ax.plot(xs, [c[1] for c in curve], marker="o", ls="--", label=f"ours, eager (R = {rows})")
    ax.plot(xs, [c[2] for c in curve], marker="o", label=f"ours, CUDA graph (R = {rows})")
    ax.plot(list(PAPER_FIG1), list(PAPER_FIG1.values()), "k^", label="paper (H100 NVL, real inputs, eager)")
    ax.set_xscale("log", base=2)
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("L (tokens)")
    ax.set_ylabel("time overhead over the plain forward (%)")
    ax.set_title(f"Qwen3-8B shape, {layers} layers, all statistics")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report(
    out: Path, j: LongCsv | LoadedCsv, f1: LongCsv, notes: list[str], args: argparse.Namespace
) -> None:
    env = f1.env
    where = f"{env['gpu']}, torch {env['torch']}, triton {env['triton']}, {env['date']}"
    smoke = "**Smoke run: tiny shapes on the CPU; the numbers mean nothing.**\n\n" if args.smoke else ""
    text = (
        f"# Appendix J and Figure 1 ({where})\n\n{smoke}"
        f"{command_line()}Raw rows: `paper_j.csv`, `paper_fig1.csv`.\n\n"
        "## Appendix J: one attention layer, ours against the dense paths\n\n"
        "Qwen3-8B layer shape (32 query / 8 KV heads, d = 128), bf16, random inputs. `dense` is the paper's "
        "Dense (SDPA output, then the response block recomputed for all heads, fp32 softmax cast to bf16, "
        "every statistic reduced in PyTorch); `output_attentions` is Transformers' eager attention returning "
        "the full L x L weights, with no statistic reduced (a lower bound of that path); the GiB column is "
        "what `output_attentions` keeps for a whole 36-layer forward. MiB: extra peak of one call. The gap "
        "names the statistic where Dense (bf16 weights) differs most from ours, "
        "mean |dense - ours| / mean |ours|.\n\n"
    )
    text += j_table(j)
    table, curve = fig1_table(f1)
    layers = args.layers
    depth = (
        "all 36 decoder layers of the real model"
        if layers == 36
        else f"{layers} identical decoder layers (the real model has 36; the GPU work is a per-layer ratio, "
        "the eager forward's fixed host cost weighs more with fewer layers)"
    )
    answer = int(f1.rows[0]["R"]) if f1.rows else args.answer
    text += (
        f"\n## Figure 1: whole-forward overhead of every statistic\n\nRandom-weight Qwen3-8B shape with "
        f"{depth}, bf16, batch 1, decoder body on both sides, R = {answer} "
        "answer tokens at every L. Eager: `record_forward` (the paper's setting) against Transformers' SDPA "
        "forward; graphed: `GraphedRecorder` against the faster of the eager and graphed plain forwards. "
        "The paper column is its reported Qwen3-8B overhead (H100 NVL, real inputs of each length).\n\n"
    )
    text += table + "\n![overhead](paper_fig1.png)\n"
    if notes:
        text += "\n## Not run\n\n" + "".join(f"- {n}\n" for n in notes)
    (out / "paper_j_fig1.md").write_text(text)
    if curve:
        plot(curve, answer, layers, out / "paper_fig1.png")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument(
        "--budget", type=float, default=150.0, help="seconds for the whole run (compiles included)"
    )
    ap.add_argument("--layers", type=int, default=36, help="identical decoder layers of the 8B-shaped model")
    ap.add_argument("--answer", type=int, default=512, help="answer tokens R of the Figure 1 points")
    ap.add_argument("--lengths", type=lambda s: tuple(int(x) for x in s.split(",")), default=FIG1_LENGTHS)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (no CUDA graphs)")
    ap.add_argument(
        "--j-csv", type=Path, help="take the Appendix J rows from this paper_j.csv (not measured)"
    )
    ap.add_argument(
        "--extras", type=float, default=0.0, help="seconds for forward_cost.py's sections (0: none)"
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    deadline = Deadline(args.budget)
    dev = Device(args.smoke)
    if dev.cuda:  # every tuning candidate of the kernels this run uses, compiled in parallel processes
        import os

        from _precompile import precompile

        mine = "FLASHSTATS_PRECOMPILE_CANDIDATES" not in os.environ
        os.environ.setdefault("FLASHSTATS_PRECOMPILE_CANDIDATES", "4")  # the d = 128 tables have four
        precompile(dims=(), workers=4, families=("Qwen3-8B",))
        if mine:  # not a setting of the run (the table's command line lists FLASHSTATS_ settings)
            del os.environ["FLASHSTATS_PRECOMPILE_CANDIDATES"]
    args.out.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    if args.j_csv is not None:
        j: LongCsv | LoadedCsv = LoadedCsv(args.j_csv, ints=("B", "L", "R"))
        notes.append(
            f"Appendix J: not measured in this run; its rows are those of {args.j_csv} ({j.env['date']})."
        )
    else:
        j = LongCsv(args.out / "paper_j.csv", ("B", "L", "R", "provider", "ms", "extra_peak_mib", "gap"))
        points, d, heads = (J_POINTS, 128, (32, 8)) if dev.cuda else (((1, 64, 16), (2, 48, 16)), 16, (4, 2))
        share = Deadline(0.3 * max(deadline.end - time.monotonic(), 0))
        notes += appendix_j(dev, j, share, points, d, heads)
        j.close()
    f1 = LongCsv(args.out / "paper_fig1.csv", ("layers", "L", "R", "mode", "ms", "extra_peak_mib"))
    model = build(dev, args.layers)
    lengths = args.lengths if dev.cuda else (96, 48)
    rows = args.answer if dev.cuda else 16
    notes += figure1(dev, f1, Deadline(deadline.end - time.monotonic() - 5), model, lengths, rows)
    f1.close()
    report(args.out, j, f1, notes, args)
    if args.extras > 0:
        from forward_cost import extras

        extras(dev, model, args.out, args.extras)


if __name__ == "__main__":
    main()
