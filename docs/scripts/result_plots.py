"""Draw the results pages' plots from the committed result files in ``benchmarks/results/``.

Run from the repository root: ``uv run python docs/scripts/result_plots.py``; it rewrites, in
``docs/results/img/``:

- ``streaming_cost.png``: the graphed decode step with and without statistics and Transformers' own step,
  and following a 256-token answer against one teacher-forced forward (``streaming.csv``);
- ``families_cost.png``: what all statistics add to a whole forward per model family and length, at a
  512-token answer (the summary table of ``families.md``, whose reference is the fastest exact plain forward);
- ``detector_transfer.png``: held-out AUROC of each candidate feature set of the packaged detector per
  source, beside the zero-fit overlap floor (``general_detector_training.json`` and the floor column of
  ``general_detector.md``).

``tests/docs/test_figures.py`` checks that the committed PNGs are what this script draws.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "results" / "img"
SHAPES = {"smollm2-135m": "SmolLM2\n135M", "qwen3-0.6b": "Qwen3\n0.6B", "llama3-8b": "Llama-3\n8B"}
COLOURS = {"plain": "#9aa3ad", "ours": "#3b6fd4", "stock": "#d9822b", "floor": "#222222"}
OTHERS = ["#d9822b", "#2e9e5b", "#9b4dca", "#c44e52"]  # feature sets other than the packaged one


def _style() -> None:
    plt.rcParams.update({"font.size": 9, "font.family": "DejaVu Sans", "axes.spines.top": False,
                         "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3})  # fmt: skip


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def markdown_rows(path: Path, first_header: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table in ``path`` whose first column is headed ``first_header``."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
        if cells is None:
            if rows:
                break
            header = None
        elif header is None and cells[0] == first_header:
            header = cells
        elif header is not None and not set(cells[0]) <= set("-: "):
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


def streaming_values() -> dict[tuple[str, str, int], dict[str, float]]:
    """``(shape, bench, context) -> {provider: value}`` from ``streaming.csv``."""
    out: dict[tuple[str, str, int], dict[str, float]] = defaultdict(dict)
    with (RESULTS / "streaming.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            out[(row["shape"], row["bench"], int(row["ctx"]))][row["provider"]] = float(row["value"])
    return out


def streaming_cost() -> bytes:
    """PNG: the decode step and following, with statistics against without (``streaming.csv``)."""
    values = streaming_values()
    fig, (step, follow) = plt.subplots(1, 2, figsize=(7.2, 3.0), width_ratios=[2, 1.2])
    labels, x = [], 0.0
    for shape, name in SHAPES.items():
        for ctx in (8192, 32768):
            v = values[(shape, "decode", ctx)]
            for dx, key, colour in (
                (-0.27, "splitk", "plain"),
                (0.0, "stats", "ours"),
                (0.27, "sdpa", "stock"),
            ):
                step.bar(x + dx, v[key], width=0.26, color=COLOURS[colour])
            step.text(x, v["stats"] + 0.4, f"{v['stats'] / v['splitk']:.2f}x", ha="center", fontsize=7)
            labels.append((x, f"{name}\n{ctx // 1024}K"))
            x += 1
    step.set_xticks([p for p, _ in labels], [t for _, t in labels], fontsize=7)
    step.set_ylabel("ms per generated token")
    step.set_title("Decode step (CUDA graph)", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLOURS[k]) for k in ("plain", "ours", "stock")]
    step.legend(
        handles, ["no statistics", "with statistics", "Transformers' step"], fontsize=7, loc="upper left"
    )
    for i, shape in enumerate(SHAPES):
        v = values[(shape, "follow", 4096)]
        follow.bar(i - 0.2, v["teacher_forced"], width=0.38, color=COLOURS["plain"])
        follow.bar(i + 0.2, v["graphed"], width=0.38, color=COLOURS["ours"])
        follow.text(
            i + 0.2, v["graphed"] + 4, f"{v['graphed'] / v['teacher_forced']:.2f}x", ha="center", fontsize=7
        )
    follow.set_xticks(range(len(SHAPES)), list(SHAPES.values()), fontsize=7)
    follow.set_ylabel("ms per 256-token answer")
    follow.set_title("Following an answer, 4K prompt", fontsize=9)
    follow.legend([handles[0], handles[1]], ["one forward", "16 chunks of 16"], fontsize=7, loc="upper left")
    fig.tight_layout()
    return _png(fig)


def families_points() -> dict[str, dict[int, dict[str, float]]]:
    """``family -> L -> {mode: overhead %}`` at R = 512 from the summary table of ``families.md``."""
    out: dict[str, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for row in markdown_rows(RESULTS / "families.md", "model"):
        if row["R"] == "512":
            out[row["model"]][int(row["L"])].setdefault(row["mode"], float(row["ours +%"]))
    return out


def families_cost() -> bytes:
    """PNG: what all statistics add per family and length at a 512-token answer, graphed and eager."""
    points = families_points()
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 3.0), sharey=True)
    for ax, mode, title in ((axes[0], "graph", "CUDA graph (GraphedRecorder)"), (axes[1], "eager", "eager")):
        for family, by_length in sorted(points.items()):
            lengths = sorted(n for n in by_length if mode in by_length[n])
            if lengths:
                ax.plot(lengths, [by_length[n][mode] for n in lengths], marker="o", ms=3, label=family)
        ax.set_xscale("log", base=2)
        ax.set_xticks([2048, 4096, 8192, 16384, 32768], ["2K", "4K", "8K", "16K", "32K"])
        ax.axhline(0, color=COLOURS["floor"], lw=0.8)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("tokens (prompt + 512-token answer)")
    axes[0].set_ylabel("% over the fastest exact plain forward")
    axes[1].set_ylim(-10, 60)
    axes[1].annotate("Qwen3-0.6B +448 %, Gemma-3-1B +388 %\nat 2K eager (host-bound)", xy=(0.98, 0.97),
                     xycoords="axes fraction", ha="right", va="top", fontsize=6.5)  # fmt: skip
    axes[0].legend(fontsize=6.5, ncol=2, loc="upper right")
    fig.tight_layout()
    return _png(fig)


def transfer_values() -> tuple[dict[str, float], dict[str, dict[str, float]], str]:
    """``(floor per source, held-out AUROC per candidate and source, the chosen candidate)``.

    The candidates are the columns of the table in ``general_detector.md`` (an anchored candidate at its
    best weight); the values are ``general_detector_training.json``'s.
    """
    rows = [r for r in markdown_rows(RESULTS / "general_detector.md", "held-out source")
            if r["held-out source"] != "mean"]  # fmt: skip
    floor = {r["held-out source"]: float(r["overlap floor"]) for r in rows}
    run = json.loads((RESULTS / "general_detector_training.json").read_text())
    shown = [c for c in rows[0] if c in run["loso_auroc"]]
    return floor, {c: run["loso_auroc"][c] for c in shown}, run.get("candidate") or run["feature_set"]


def detector_transfer() -> bytes:
    """PNG: held-out AUROC per source of each feature set, beside the overlap floor."""
    floor, auroc, chosen = transfer_values()
    sources = sorted(floor, key=floor.get)
    fig, ax = plt.subplots(figsize=(7.2, 3.4))
    ys = range(len(sources))
    others = iter(zip(OTHERS, "sDv^", strict=False))
    for name, per_source in sorted(auroc.items()):
        colour, marker = (COLOURS["ours"], "o") if name == chosen else next(others)
        style = {
            "color": colour,
            "marker": marker,
            "ms": 7 if name == chosen else 4,
            "zorder": 3 if name == chosen else 2,
        }
        label = f"{name} (packaged)" if name == chosen else name
        ax.plot([per_source[s] for s in sources], ys, ls="none", label=label, **style)
    ax.plot([floor[s] for s in sources], ys, ls="none", marker="|", ms=14, mew=2, color=COLOURS["floor"],
            label="overlap floor (no training)")  # fmt: skip
    ax.set_yticks(list(ys), [s.replace("_", " ") for s in sources], fontsize=7.5)
    ax.set_xlabel("AUROC on the held-out source (trained on the other eight)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return _png(fig)


FIGURES = {
    "streaming_cost.png": streaming_cost,
    "families_cost.png": families_cost,
    "detector_transfer.png": detector_transfer,
}


def main() -> None:
    """Rewrite every figure of ``FIGURES`` in ``docs/results/img/``."""
    _style()
    for name, draw in FIGURES.items():
        (OUT / name).write_bytes(draw())
        print(f"wrote docs/results/img/{name}")


if __name__ == "__main__":
    main()
