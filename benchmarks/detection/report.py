"""Tables (CSV + Markdown), plots (PNG) and JSON of the detection evaluation."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import platform
from pathlib import Path

DISPLAY = {
    "ragtruth_qa": "RAGTruth QA",
    "ragtruth_qa_llama": "RAGTruth QA (llama-2-70b)",
    "ragtruth_summary": "RAGTruth Summary",
    "ragtruth_data2txt": "RAGTruth Data2txt",
    "faithbench": "FaithBench",
    "ragtruth_all": "RAGTruth (3 tasks)",
    "claims_wice": "WiCE",
    "claims_lfqa": "LFQA",
    "claims_claimverify": "ClaimVerify",
    "claims_expertqa": "ExpertQA",
}


def environment(extract: dict) -> dict:
    """Date, device and versions recorded with every table."""
    import sklearn
    import torch
    import transformers

    try:
        import triton

        tv = triton.__version__
    except ImportError:
        tv = "absent"
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": extract.get("device", "?"),
        "dtype": extract.get("dtype", "?"),
        "kernel_backend": extract.get("backend", "?"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": tv,
        "transformers": transformers.__version__,
        "sklearn": sklearn.__version__,
        "proxy": "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised)",
    }


def _ci(v, ci) -> str:
    return f"{v:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def _write(out: Path, name: str, text: str) -> None:
    (out / name).write_text(text)


def _csv(out: Path, name: str, rows: list[dict], env: dict) -> None:
    if not rows:
        return
    buf = io.StringIO()
    keys = list(dict.fromkeys(k for r in rows for k in r))
    keys += [k for k in env if k not in keys]
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    for r in rows:
        w.writerow({**env, **r})
    _write(out, name, buf.getvalue())


def _md(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main_rows(results: dict, fitted: dict) -> list[dict]:
    """One row per (dataset, method) with test F1/AUROC and their intervals."""
    rows = []
    for d, per in results.items():
        for m, r in per.items():
            rows.append(
                {
                    "dataset": d,
                    "method": m,
                    "kind": fitted[d]["methods"][m]["kind"],
                    "f1": r.f1,
                    "f1_lo": r.f1_ci[0],
                    "f1_hi": r.f1_ci[1],
                    "auroc": r.auroc,
                    "auroc_lo": r.auroc_ci[0],
                    "auroc_hi": r.auroc_ci[1],
                    "precision": r.precision,
                    "recall": r.recall,
                    "threshold": r.threshold,
                    "n": r.n,
                    "n_positive": r.n_positive,
                    "n_groups": r.n_groups,
                }
            )
    return rows


def main_markdown(rows: list[dict]) -> str:
    """Wide table: methods as rows, datasets as column pairs (F1 / AUROC with intervals)."""
    ds = list(dict.fromkeys(r["dataset"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    idx = {(r["dataset"], r["method"]): r for r in rows}
    head = ["method"] + [f"{DISPLAY.get(d, d)} {k}" for d in ds for k in ("F1", "AUROC")]
    body = []
    for m in methods:
        cells = [m]
        for d in ds:
            r = idx.get((d, m))
            cells += (
                [_ci(r["f1"], (r["f1_lo"], r["f1_hi"])), _ci(r["auroc"], (r["auroc_lo"], r["auroc_hi"]))]
                if r
                else ["", ""]
            )
        body.append(cells)
    counts = ", ".join(
        f"{DISPLAY.get(d, d)}: {idx[(d, methods[0])]['n']} answers / "
        f"{idx[(d, methods[0])]['n_groups']} groups"
        for d in ds
    )
    return _md(head, body) + f"\nTest sets: {counts}.\n"


def tests_markdown(tests: dict) -> tuple[str, list[dict]]:
    """Markdown and flat rows of the paired bootstrap tests."""
    rows, lines = [], []
    for family, items in tests.items():
        for t in items:
            rows.append(
                {
                    "family": family,
                    **{k: (v if not isinstance(v, list) else f"{v[0]:.4f};{v[1]:.4f}") for k, v in t.items()},
                }
            )
    for family, title in (
        ("additions", "Adding attention blocks"),
        ("probe_vs_judge", "Probe vs the same model as judge"),
        ("vs_text_only", "Detectors vs text-only baselines on RAGTruth QA (AUROC)"),
    ):
        items = tests.get(family, [])
        if not items:
            continue
        lines.append(
            f"\n**{title}** (paired group bootstrap, Δ = b − a, Holm-corrected p within each family)\n\n"
        )
        body = [
            [
                DISPLAY.get(t.get("dataset", "ragtruth_qa"), t.get("dataset", "")),
                t["a"],
                t["b"],
                t["metric"],
                f"{t['delta']:+.3f} [{t['ci'][0]:+.3f}, {t['ci'][1]:+.3f}]",
                f"{t['p']:.4f}",
                f"{t.get('p_holm', float('nan')):.4f}",
            ]
            for t in items
        ]
        lines.append(_md(["dataset", "a", "b", "metric", "Δ [95% CI]", "p", "p (Holm)"], body))
    return "".join(lines), rows


def transfer_markdown(trans: dict) -> tuple[str, list[dict]]:
    """AUROC matrix of the transfer runs."""
    rows = [
        {
            "fit": r["fit"],
            "test": r["test"],
            "method": r["method"],
            "auroc": r["result"].auroc,
            "auroc_lo": r["result"].auroc_ci[0],
            "auroc_hi": r["result"].auroc_ci[1],
            "f1": r["result"].f1,
            "n": r["result"].n,
        }
        for r in trans["rows"]
    ]
    lines = []
    for fit in dict.fromkeys(r["fit"] for r in rows):
        sub = [r for r in rows if r["fit"] == fit]
        tests = list(dict.fromkeys(r["test"] for r in sub))
        methods = list(dict.fromkeys(r["method"] for r in sub))
        idx = {(r["test"], r["method"]): r for r in sub}
        body = [
            [m]
            + [
                (
                    _ci(idx[(t, m)]["auroc"], (idx[(t, m)]["auroc_lo"], idx[(t, m)]["auroc_hi"]))
                    if (t, m) in idx
                    else ""
                )
                for t in tests
            ]
            for m in methods
        ]
        lines.append(f"\n**Fitted on {DISPLAY.get(fit, fit)}** (test AUROC [95% CI])\n\n")
        lines.append(_md(["method"] + [DISPLAY.get(t, t) for t in tests], body))
    return "".join(lines), rows


def localisation_markdown(loc: dict) -> str:
    body = [
        [
            r["method"],
            DISPLAY.get(r["task"], "all three tasks"),
            _ci(r["token_auroc"], r["token_auroc_ci"]),
            f"{r['span_precision']:.3f}",
            f"{r['span_recall']:.3f}",
            _ci(r["span_f1"], r["span_f1_ci"]),
            f"{r['token_f1']:.3f}",
            f"{r['n_answers']} / {r['n_tokens']} ({r['n_positive_tokens']} pos.)",
        ]
        for r in loc["results"]
    ]
    head = [
        "scorer",
        "test",
        "token AUROC [95% CI]",
        "span P",
        "span R",
        "span F1 [95% CI]",
        "token F1",
        "answers / tokens",
    ]
    return (
        _md(head, body)
        + "".join(
            f"\n{name}: C = {f['C']}, val. token AUROC {f['val_token_auroc']:.3f}, window {f['window']}, "
            f"smoothing {f['smooth']}, gap {f['gap']} (all chosen on validation)."
            for name, f in loc["fit"].items()
        )
        + f"\n\n{loc['n_features']} features per token before the context view.\n"
    )


def cost_markdown(cost: dict | None, extract: dict) -> str:
    lines = []
    if extract:
        lines.append(
            f"Whole evaluation: {extract['examples_computed']} forwards, "
            f"{extract['seconds_per_example']:.3f} s per example (batch {extract['batch_size']}, "
            f"{extract['device']}, {extract['dtype']}, backend {extract['backend']}), "
            f"peak GPU memory {extract['peak_gpu_bytes'] / 2**20:.0f} MiB.\n\n"
            if extract.get("peak_gpu_bytes")
            else f"Whole evaluation: {extract['examples_computed']} forwards, "
            f"{extract['seconds_per_example']:.3f} s per example "
            f"(batch {extract['batch_size']}, {extract['device']}).\n\n"
        )
    if cost:
        body = [
            [
                p,
                f"{v['seconds_mean'] * 1e3:.1f}",
                f"{v['seconds_median'] * 1e3:.1f}",
                "n/a" if v["peak_mib_mean"] is None else f"{v['peak_mib_mean']:.1f}",
                "n/a" if v["peak_mib_max"] is None else f"{v['peak_mib_max']:.1f}",
            ]
            for p, v in cost["paths"].items()
        ]
        lines.append(
            f"Sample: {cost['n']} RAGTruth QA test answers, batch 1, "
            f"median {cost['tokens_median']:.0f} tokens "
            f"(max {cost['tokens_max']}), {cost['device']}, {cost['dtype']}.\n\n"
        )
        lines.append(
            _md(
                [
                    "path",
                    "ms / example (mean)",
                    "ms (median)",
                    "peak extra MiB (mean)",
                    "peak extra MiB (max)",
                ],
                body,
            )
        )
    return "".join(lines)


def write(out: Path, fitted, results, tests, trans, loc, cost, extract, judge) -> None:
    """Write every table, plot and JSON under ``out``."""
    import plots

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(extract)
    rows = main_rows(results, fitted)
    _csv(out, "main.csv", rows, env)
    tmd, trows = tests_markdown(tests)
    _csv(out, "tests.csv", trows, env)
    xmd, xrows = transfer_markdown(trans)
    _csv(out, "transfer.csv", xrows, env)
    if loc:
        _csv(out, "localisation.csv", loc["results"], env)
    sel = {
        d: {"feature_sets": f["selection"], "best_probe_by_validation": f.get("best_probe")}
        for d, f in fitted.items()
    }
    if judge:
        sel["judge"] = {
            "template": judge["template"],
            "mean_validation_auroc": judge["mean_auroc"],
            "aurocs": judge["aurocs"],
        }
    (out / "selection.json").write_text(json.dumps(sel, indent=1, default=float))
    (out / "cost.json").write_text(
        json.dumps(
            {"extract": {k: v for k, v in extract.items() if k != "induction"}, "cost": cost},
            indent=1,
            default=float,
        )
    )
    for fn, args in (
        (plots.roc, (out / "detection_roc.png", fitted)),
        (plots.bars, (out / "detection_auroc_bars.png", rows)),
    ):
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - a plot must not lose the tables
            print(f"report: plot {fn.__name__} failed: {exc!r}", flush=True)
    meta = "\n".join(f"- {k}: {v}" for k, v in env.items())
    parts = [
        f"# Detection results\n\n{meta}\n\n## Main table (test F1 at the validation threshold, AUROC; "
        "95% group-bootstrap intervals)\n\n",
        main_markdown(rows),
        "\n## Paired tests\n",
        tmd,
        "\n## Transfer\n",
        xmd,
        "\n## Token-level localisation (RAGTruth spans)\n\n",
        localisation_markdown(loc) if loc else "(failed; see the log)\n",
        "\n## Extraction cost\n\n",
        cost_markdown(cost, extract),
    ]
    if judge:
        jt = _md(
            ["template"] + [DISPLAY.get(d, d) for d in next(iter(judge["aurocs"].values()))],
            [[t] + [f"{v:.3f}" for v in per.values()] for t, per in judge["aurocs"].items()],
        )
        parts.append(f"\n## Judge template selection (validation AUROC; chosen: {judge['template']})\n\n{jt}")
    _write(out, "report.md", "".join(parts))
    _write(out, "main_table.md", main_markdown(rows))
    print(main_markdown(rows))


def rebuild(folder: Path) -> None:
    """Rebuild the Markdown tables and the AUROC bar chart from a results folder's CSV/JSON alone.

    Used when a run's analysis wrote ``main.csv``, ``judge.json``, ``extract.json`` and ``cost.json`` but
    stopped before its report (as the H200 run of 2026-11-30 did).
    """
    import plots

    folder = Path(folder)
    with open(folder / "main.csv") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in (
            "f1",
            "f1_lo",
            "f1_hi",
            "auroc",
            "auroc_lo",
            "auroc_hi",
            "precision",
            "recall",
            "threshold",
        ):
            r[k] = float(r[k])
        for k in ("n", "n_positive", "n_groups"):
            r[k] = int(r[k])
    _write(folder, "main_table.md", main_markdown(rows))
    plots.bars(folder / "detection_auroc_bars.png", rows)
    extract = json.loads((folder / "extract.json").read_text())
    cost = json.loads((folder / "cost.json").read_text())
    _write(folder, "cost.md", cost_markdown(cost, extract))
    judge = json.loads((folder / "judge.json").read_text())
    first = next(iter(judge["aurocs"].values()))
    jt = _md(
        ["template"] + [DISPLAY.get(d, d) for d in first],
        [[t] + [f"{v:.3f}" for v in per.values()] for t, per in judge["aurocs"].items()],
    )
    _write(
        folder,
        "judge_selection.md",
        f"Chosen: {judge['template']} (mean validation AUROC {judge['mean_auroc']:.3f})\n\n{jt}",
    )


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    rebuild(Path(sys.argv[1]))
