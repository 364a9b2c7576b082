"""ROC curves per dataset and the AUROC bar chart with intervals (PNG, matplotlib Agg)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

ROC_METHODS = ("A7", "A64", "H64", "L9", "A64H64", "ALL", "RAUQ", "LookbackLens", "text-only TF-IDF")


def _roc(scores, y):
    from sklearn.metrics import roc_curve

    fpr, tpr, _ = roc_curve(y, scores)
    return fpr, tpr


def roc(path: Path, fitted: dict) -> None:
    """Test ROC per dataset, two panels per row: probes, detectors, judge and TF-IDF, AUROC in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from report import DISPLAY

    names = list(fitted)
    cols = min(2, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 5.2 * rows), squeeze=False)
    for ax in axes.flat[len(names) :]:
        ax.axis("off")
    for ax, d in zip(axes.flat, names, strict=False):
        f = fitted[d]
        y = f["labels"]["test"]
        judge = [m for m, s in f["methods"].items() if s["kind"] == "judge"]
        for m in (*ROC_METHODS, *judge):
            if m not in f["methods"] or len(set(y)) < 2:
                continue
            fpr, tpr = _roc(f["methods"][m]["test"], y)
            style = "--" if f["methods"][m]["kind"] != "probe" else "-"
            auc = float(np.trapezoid(tpr, fpr))
            ax.plot(fpr, tpr, style, lw=1.2, label=f"{m.replace('SmolLM2 judge', 'judge')} ({auc:.2f})")
        ax.plot([0, 1], [0, 1], ":", color="grey", lw=0.8)
        ax.set_title(DISPLAY.get(d, d), fontsize=10)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_aspect("equal")
        ax.legend(fontsize=7, loc="lower right", title="test AUROC", title_fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def bars(path: Path, rows: list[dict]) -> None:
    """Grouped bars: test AUROC with 95% intervals of every method, one group per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from report import DISPLAY

    ds = list(dict.fromkeys(r["dataset"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    idx = {(r["dataset"], r["method"]): r for r in rows}
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(max(10, 2.6 * len(ds)), 5.6))
    cmap = plt.get_cmap("tab20")
    for k, m in enumerate(methods):
        xs, ys, lo, hi = [], [], [], []
        for i, d in enumerate(ds):
            r = idx.get((d, m))
            if r is None or not np.isfinite(r["auroc"]):
                continue
            xs.append(i - 0.4 + (k + 0.5) * width)
            ys.append(r["auroc"])
            lo.append(r["auroc"] - r["auroc_lo"])
            hi.append(r["auroc_hi"] - r["auroc"])
        ax.bar(
            xs,
            ys,
            width,
            yerr=[lo, hi],
            capsize=1.5,
            color=cmap(k % 20),
            label=m.replace("SmolLM2 judge", "judge"),
            error_kw={"lw": 0.6},
        )
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xticks(range(len(ds)))
    ax.set_xticklabels([DISPLAY.get(d, d) for d in ds], fontsize=9)
    ax.set_ylabel("test AUROC (95% group-bootstrap interval)")
    ax.set_ylim(0.2, 1.0)
    ax.legend(fontsize=7, ncol=9, loc="upper center", bbox_to_anchor=(0.5, -0.07))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
