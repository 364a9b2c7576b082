"""The Markdown report of ``halluprobe train`` with ROC and precision-recall plots (matplotlib Agg)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from halubench_data.files import atomic_path, atomic_write_bytes


def _curves(scores: np.ndarray, y: np.ndarray):
    from sklearn.metrics import precision_recall_curve, roc_curve

    fpr, tpr, _ = roc_curve(y, scores)
    prec, rec, _ = precision_recall_curve(y, scores)
    return (fpr, tpr), (rec, prec)


@dataclass(frozen=True)
class CurveEntry:
    """One method's curves in the ROC and precision-recall plots: its legend labels and its style."""

    name: str
    """Method name."""
    roc_label: str
    """ROC legend entry, ``"name (AUC 0.812)"``."""
    pr_label: str
    """Precision-recall legend entry, ``"name (AP 0.640)"`` (average precision)."""
    color: tuple[float, float, float]
    """RGB: the first 20 methods each get a colour of their own."""
    linestyle: str
    """Solid for the first 10, dashed for the next 10 (the lighter tab20 colours), dotted after."""


def curve_entries(test_scores: dict[str, np.ndarray], y: np.ndarray) -> list[CurveEntry]:
    """Legend labels (AUC, AP) and distinguishable styles, best test AUROC first."""
    from halubench_data.metrics import auroc
    from matplotlib import colormaps
    from sklearn.metrics import average_precision_score

    rgba = [colormaps["tab20"](k) for k in range(20)]  # an int picks the k-th listed colour
    tab20 = [(r, g, b) for r, g, b, _ in rgba]
    colours = [*tab20[0::2], *tab20[1::2]]  # ten strong colours, then their ten light partners
    rows = []
    for name, s in test_scores.items():
        s = np.asarray(s, dtype=np.float64)
        rows.append((name, auroc(s, y), float(average_precision_score(y, s))))
    rows.sort(key=lambda r: -r[1] if np.isfinite(r[1]) else np.inf)
    return [
        CurveEntry(
            name,
            f"{name} (AUC {auc:.3f})",
            f"{name} (AP {ap:.3f})",
            colours[i % 20],
            ("-", "--", ":")[min(i // 10, 2)],
        )  # fmt: skip
        for i, (name, auc, ap) in enumerate(rows)
    ]


def plot_curves(out: Path, test_scores: dict[str, np.ndarray], y: np.ndarray, prefix: str = "") -> list[str]:
    """Write ``<prefix>roc.png`` and ``<prefix>pr.png`` under ``out``; returns the file names.

    The legends list the methods best test AUROC first, with their AUC (ROC) or average precision (PR),
    beside the plot; styles come from `curve_entries`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    roc_name, pr_name = f"{prefix}roc.png", f"{prefix}pr.png"
    figs = {roc_name: plt.subplots(figsize=(8.5, 5)), pr_name: plt.subplots(figsize=(8.5, 5))}
    for entry in curve_entries(test_scores, y):
        roc, pr = _curves(np.asarray(test_scores[entry.name], dtype=np.float64), y)
        style: dict[str, Any] = dict(lw=1.3, color=entry.color, ls=entry.linestyle)
        figs[roc_name][1].plot(*roc, label=entry.roc_label, **style)
        figs[pr_name][1].plot(*pr, label=entry.pr_label, **style)
    ax = figs[roc_name][1]
    ax.plot([0, 1], [0, 1], "k:", lw=0.8)
    ax.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC (test)")
    ax = figs[pr_name][1]
    ax.axhline(float(np.mean(y)), color="k", ls=":", lw=0.8)
    ax.set(xlabel="recall", ylabel="precision", title="Precision-recall (test, hallucinated class)")
    for fname, (fig, ax) in figs.items():
        ax.set_aspect("equal")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
        fig.tight_layout()
        with atomic_path(out / fname) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
        plt.close(fig)
    return list(figs)


def write_report(
    out: Path, table: str, test_scores, y, fits, tests, dataset_name: str, extra_sections: str = ""
) -> Path:
    """Write ``out/report.md`` (results table, selections, addition tests, plots); returns its path.

    ``tests`` are `halluprobe.evaluation.PairedTest` with ``p_holm`` set; ``extra_sections`` is
    Markdown placed before the curves (the calibration section).
    """
    plot_curves(out, test_scores, np.asarray(y))
    lines = [
        f"# halluprobe report: {dataset_name}",
        "",
        "Test F1 at the validation-F1 threshold and test AUROC, with 95% group-bootstrap intervals.",
        "Scores: higher means more likely hallucinated. Δ floor: test AUROC minus the best grounding",
        "floor's (the zero-fit context overlap or the fitted text-only grounding regression).",
        "",
        table,
        "",
        "## What validation chose",
        "",
        "| feature set | C | threshold | validation AUROC | other |",
        "|---|---|---|---|---|",
    ]
    for name, fit in fits.items():
        other = ", ".join(f"{k}={int(v)}" for k, v in fit.selection.items()) or "-"
        lines.append(f"| {name} | {fit.C:g} | {fit.threshold:.3f} | {fit.val_auroc:.3f} | {other} |")
    if tests:
        lines += [
            "",
            "## Block additions (paired group bootstrap of test F1, 100,000 resamples, seed 42, Holm)",
            "",
            "| addition | ΔF1 | 95% CI | p | p (Holm) |",
            "|---|---|---|---|---|",
        ]
        for t in tests:
            ci = f"[{t.ci[0]:.3f}, {t.ci[1]:.3f}]"
            lines.append(f"| {t.a} -> {t.b} | {t.delta:+.3f} | {ci} | {t.p:.4f} | {t.p_holm:.4f} |")
    lines += [extra_sections] if extra_sections else []
    lines += ["", "## Curves", "", "![ROC](roc.png)", "", "![PR](pr.png)", ""]
    lines += ["Detectors: `detectors/<feature set>/` (load with `halluprobe.Detector.load`).", ""]
    lines += ["Every number above, machine-readable: `results.json` (`halluprobe.evaluation`).", ""]
    path = out / "report.md"
    atomic_write_bytes(path, "\n".join(lines).encode())
    return path


ROC_METHODS = ("A7", "A64", "H64", "L9", "A64H64", "ALL", "RAUQ", "LookbackLens", "text-only TF-IDF")
"""Methods drawn in `plot_roc_grid` (plus every judge), when present."""


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png", bbox_inches="tight")
    plt.close(fig)


def plot_roc_grid(path: Path, evaluations, names: dict[str, str] | None = None) -> None:
    """Test ROC per dataset, two panels per row: probes solid, detectors/judge/text-only dashed.

    Args:
        path: PNG file to write.
        evaluations: ``{dataset: DatasetEvaluation}`` (`halluprobe.evaluation`).
        names: display names of the datasets.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    names = names or {}
    keys = list(evaluations)
    cols = min(2, len(keys))
    rows = -(-len(keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 5.2 * rows), squeeze=False)
    for ax in axes.flat[len(keys) :]:
        ax.axis("off")
    for ax, d in zip(axes.flat, keys, strict=False):
        ev = evaluations[d]
        judges = [m for m, s in ev.methods.items() if s.kind == "judge"]
        for m in (*ROC_METHODS, *judges):
            if m not in ev.methods or len(set(ev.y_test.tolist())) < 2:
                continue
            fpr, tpr, _ = roc_curve(ev.y_test, ev.methods[m].test)
            style = "--" if ev.methods[m].kind != "probe" else "-"
            auc = float(np.trapezoid(tpr, fpr))
            ax.plot(fpr, tpr, style, lw=1.2, label=f"{m.replace('SmolLM2 judge', 'judge')} ({auc:.2f})")
        ax.plot([0, 1], [0, 1], ":", color="grey", lw=0.8)
        ax.set(
            title=names.get(d, d), xlabel="false positive rate", ylabel="true positive rate", aspect="equal"
        )
        ax.title.set_fontsize(10)
        ax.legend(fontsize=7, loc="lower right", title="test AUROC", title_fontsize=7)
    fig.tight_layout()
    _save(fig, path)


def plot_auroc_bars(path: Path, rows: list[dict], names: dict[str, str] | None = None) -> None:
    """Grouped bars of test AUROC with 95% intervals, one group per dataset (rows: `tables.main_rows`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = names or {}
    ds = list(dict.fromkeys(r["dataset"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    idx = {(r["dataset"], r["method"]): r for r in rows}
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(max(10, 2.6 * len(ds)), 5.6))
    cmap = plt.get_cmap("tab20")
    for k, m in enumerate(methods):
        got = [(i, idx[d, m]) for i, d in enumerate(ds) if (d, m) in idx and np.isfinite(idx[d, m]["auroc"])]
        ax.bar(
            [i - 0.4 + (k + 0.5) * width for i, _ in got],
            [r["auroc"] for _, r in got],
            width,
            # clipped at 0: the bootstrap's exact AUROC and sklearn's point value may differ in the last bit
            yerr=np.maximum(
                0.0,
                [[r["auroc"] - r["auroc_lo"] for _, r in got], [r["auroc_hi"] - r["auroc"] for _, r in got]],
            ),
            capsize=1.5,
            color=cmap(k % 20),
            label=m.replace("SmolLM2 judge", "judge"),
            error_kw={"lw": 0.6},
        )
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xticks(range(len(ds)))
    ax.set_xticklabels([names.get(d, d) for d in ds], fontsize=9)
    ax.set(ylabel="test AUROC (95% group-bootstrap interval)", ylim=(0.2, 1.0))
    ax.legend(fontsize=7, ncol=9, loc="upper center", bbox_to_anchor=(0.5, -0.07))
    fig.tight_layout()
    _save(fig, path)
