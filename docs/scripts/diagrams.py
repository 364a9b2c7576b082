"""Draw the docs' diagrams (SVG, matplotlib): the response block and which pass computes which tier.

Run from the repository root: ``uv run python docs/scripts/diagrams.py``; it rewrites
``docs/img/response_block.svg`` and ``docs/img/passes.svg``. The output is deterministic (no date, a fixed
hash salt), and ``tests/docs/test_diagrams.py`` checks that the committed files are what this script draws.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "img"
# one colour per tier, the same in both diagrams
TIER = {"T1": "#3b6fd4", "T2": "#d9822b", "T3": "#2e9e5b", "T4": "#9b4dca", "pass": "#5c6370"}
PROMPT, RESPONSE, HIDDEN, PAD = "#cfe0fb", "#fde2c4", "#f4f4f4", "#d9d9d9"


def _style() -> None:
    plt.rcParams.update(
        {
            "svg.hashsalt": "flashstats-docs",
            "svg.fonttype": "none",
            "font.size": 10,
            "font.family": "sans-serif",
        }
    )


def _save(fig: plt.Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", pad_inches=0.05, metadata={"Date": None})
    plt.close(fig)
    return buf.getvalue()


def response_block() -> str:
    """The R x L response block: visibility, prompt keys, and where T1, T2 and T3 read it."""
    _style()
    n_keys, n_rows, prompt, pad = 12, 5, 7, 1  # L, R, P, left padding
    fig, ax = plt.subplots(figsize=(9.2, 5.0))
    top = n_rows
    for i in range(n_rows):
        pos = n_keys - n_rows + i  # p_i = L - R + i
        y = top - 1 - i
        for j in range(n_keys):
            if j < pad:
                face = PAD
            elif j <= pos:
                face = PROMPT if j < prompt else RESPONSE
            else:
                face = HIDDEN
            ax.add_patch(Rectangle((j, y), 1, 1, facecolor=face, edgecolor="white", lw=1.5))
        for j, mark, tier in ((pos, "D", "T2"), (pos - 1, "P", "T2"), (pad, "S", "T2")):
            ax.text(j + 0.5, y + 0.5, mark, ha="center", va="center", color=TIER[tier], weight="bold")
        ax.text(-0.3, y + 0.5, f"row {i}  (p = {pos})", ha="right", va="center", fontsize=9)
        ax.annotate(
            "",
            xy=(n_keys + 1.6, y + 0.5),
            xytext=(n_keys + 0.2, y + 0.5),
            arrowprops={"arrowstyle": "->", "color": TIER["T1"], "lw": 1.4},
        )
    for j in range(n_keys):
        ax.text(j + 0.5, top + 0.25, str(j), ha="center", va="bottom", fontsize=8, color="#555")
        ax.annotate(
            "",
            xy=(j + 0.5, -1.1),
            xytext=(j + 0.5, -0.15),
            arrowprops={"arrowstyle": "->", "color": TIER["T3"], "lw": 1.0},
        )
    ax.text(-0.3, top + 0.25, "key j", ha="right", va="bottom", fontsize=9, color="#555")
    ax.plot([prompt, prompt], [-0.05, top + 0.05], color="#333", lw=1.2, ls="--")
    ax.text(prompt - 0.15, top + 0.85, "prompt keys j < P", ha="right", fontsize=9)
    ax.text(prompt + 0.15, top + 0.85, "response keys", ha="left", fontsize=9)
    ax.text(
        n_keys + 1.8,
        top - 0.1,
        "T1 (fused in the pass):\none sweep along each row:\nentropy, prompt mass,\nmax weight, support",
        va="top",
        fontsize=9,
        color=TIER["T1"],
    )
    ax.text(
        n_keys / 2,
        -1.35,
        "T3 (second, key-major pass): column sums c_j and means down each column",
        ha="center",
        va="top",
        fontsize=9,
        color=TIER["T3"],
    )
    ax.text(
        n_keys / 2,
        -2.0,
        "T2 lookups from the LSE:  D diagonal log p(i, p_i),  P previous token,  S sink (first real key)",
        ha="center",
        va="top",
        fontsize=9,
        color=TIER["T2"],
    )
    legend = [
        (PROMPT, "visible prompt key"),
        (RESPONSE, "visible response key"),
        (HIDDEN, "after p_i (causal)"),
        (PAD, "padding (key_mask False)"),
    ]
    for k, (face, label) in enumerate(legend):
        x = -2.2 + k * 5.0
        ax.add_patch(Rectangle((x, -3.3), 0.6, 0.6, facecolor=face, edgecolor="#999", lw=0.5))
        ax.text(x + 0.8, -3.0, label, va="center", fontsize=8.5)
    ax.set_xlim(-3.2, n_keys + 7.0)
    ax.set_ylim(-3.5, top + 1.3)
    ax.set_aspect("equal")
    ax.axis("off")
    return _save(fig)


def _box(ax, x, y, w, h, color, title, lines):
    ax.add_patch(
        FancyBboxPatch(
            (x, y),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.12",
            facecolor="white",
            edgecolor=color,
            lw=2,
        )
    )
    ax.text(x + 0.15, y + h - 0.18, title, va="top", weight="bold", color=color, fontsize=10)
    ax.text(x + 0.15, y + h - 0.62, "\n".join(lines), va="top", fontsize=8.6, linespacing=1.45)


def _arrow(ax, start, end, label="", color="#333"):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, color=color, lw=1.4))
    if label:
        ax.text(
            (start[0] + end[0]) / 2,
            (start[1] + end[1]) / 2 + 0.12,
            label,
            ha="center",
            va="bottom",
            fontsize=8.5,
            color=color,
        )


def passes() -> str:
    """Which pass computes which tier, what each reads and writes, and its cost per head."""
    _style()
    fig, ax = plt.subplots(figsize=(11.5, 5.2))
    ax.text(0.1, 5.2, "Q (response rows), K, V", fontsize=10, weight="bold")
    _box(
        ax,
        0.1,
        2.2,
        3.7,
        2.7,
        TIER["T1"],
        "Pass 1: query-major (FlashAttention)",
        [
            "tiles of keys stream past each row block",
            "online softmax: running max m, sum l",
            "writes out [R, D] and lse [R]",
            "T1 row statistics, fused:",
            "  entropy, prompt mass, max weight,",
            "  effective support  ([R] fp32 each)",
        ],
    )
    _box(
        ax,
        4.4,
        3.2,
        3.7,
        1.7,
        TIER["T2"],
        "T2: lookups after the pass",
        [
            "recompute a few scores s(i, j),",
            "p = exp(s - lse): diagonal, previous",
            "token, sinks  (1 + 1 + S per row)",
        ],
    )
    _box(
        ax,
        4.4,
        0.2,
        3.7,
        2.6,
        TIER["T3"],
        "Pass 2: key-major (T3)",
        [
            "tiles of rows stream past each key block",
            "every score again, p = exp(s - lse)",
            "sums down each column:",
            "  column sum c_j, mean  ([L] fp32)",
            "no atomics: bitwise deterministic",
        ],
    )
    _box(
        ax,
        8.7,
        1.6,
        2.6,
        2.4,
        TIER["T4"],
        "T4: dense (opt-in)",
        ["materialises p [R, L] for", "chosen heads only:", "attention maps, TOHA,", "row top-k mass"],
    )
    _arrow(ax, (1.9, 5.1), (1.9, 4.95))
    _arrow(ax, (3.8, 4.2), (4.4, 4.2), "lse", TIER["T1"])
    _arrow(ax, (3.8, 2.6), (4.4, 1.9), "lse", TIER["T1"])
    ax.text(
        0.1,
        1.7,
        "memory per head:\nT1, T2  O(R)    T3  O(L)\nT4  O(R L)  (what output_attentions\n"
        "pays for every head)",
        va="top",
        fontsize=8.8,
        color="#333",
    )
    ax.set_xlim(0, 11.4)
    ax.set_ylim(0, 5.5)
    ax.axis("off")
    return _save(fig)


DIAGRAMS = {"response_block.svg": response_block, "passes.svg": passes}


def main() -> None:
    """Write every diagram into docs/img/."""
    OUT.mkdir(parents=True, exist_ok=True)
    for name, draw in DIAGRAMS.items():
        (OUT / name).write_text(draw())


if __name__ == "__main__":
    main()
