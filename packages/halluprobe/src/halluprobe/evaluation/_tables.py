"""Tables of a many-dataset evaluation: CSV rows and Markdown, from `halluprobe.evaluation`'s typed results.

`main_rows` flattens `DatasetEvaluation` objects into one row per (dataset, method); `main_markdown` lays
them out with methods as rows and datasets as column pairs (F1 and AUROC with intervals); the other
``*_markdown`` functions render paired tests, transfer, token-level localisation, extraction cost and
the judge's template selection. `write_csv` stamps every row with `environment` (date, device,
library versions). The detection benchmark (``benchmarks/detection/``) and the docs page generator
(`halluprobe.detection_page`) read and write these.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from halubench_data.files import atomic_write_text

from halluprobe.evaluation._evaluation import DatasetEvaluation, PairedTest, TransferResult
from halluprobe.evaluation._sections import DATASET_NAMES, _ci, _md, _name, cost_markdown, judge_markdown

__all__ = [
    "DATASET_NAMES",
    "cost_markdown",
    "environment",
    "judge_markdown",
    "localisation_markdown",
    "main_markdown",
    "main_rows",
    "read_csv",
    "tests_markdown",
    "transfer_markdown",
    "write_csv",
]

MAIN_FLOATS = ("f1", "f1_lo", "f1_hi", "auroc", "auroc_lo", "auroc_hi", "precision", "recall", "threshold")
MAIN_INTS = ("n", "n_positive", "n_groups")


def device_name(device: str) -> str:
    """The GPU's name for a CUDA ``device``, else ``CPU (<processor>, <threads> threads)`` (provenance)."""
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def environment(extract: Mapping[str, Any], proxy: str) -> dict[str, str]:
    """Date, device, dtype, kernel backend and library versions recorded with every table row."""
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
        "proxy": proxy,
    }


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], env: Mapping[str, Any]) -> None:
    """Write ``rows`` (columns in first-seen order, then the ``env`` columns) atomically; none: no file."""
    if not rows:
        return
    buf = io.StringIO()
    keys = list(dict.fromkeys(k for r in rows for k in r))
    keys += [k for k in env if k not in keys]
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    for r in rows:
        w.writerow({**env, **r})
    atomic_write_text(path, buf.getvalue(), overwrite=True)


def read_csv(path: Path, floats: Sequence[str] = MAIN_FLOATS, ints: Sequence[str] = MAIN_INTS) -> list[dict]:
    """Rows of a CSV written by `write_csv`, with the named columns converted back to numbers."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r.update({k: float(r[k]) for k in floats if r.get(k, "") != ""})
        r.update({k: int(r[k]) for k in ints if r.get(k, "") != ""})
    return rows


def main_rows(evaluations: Mapping[str, DatasetEvaluation]) -> list[dict]:
    """One row per (dataset, method): kind, test F1/AUROC with intervals, precision, recall, threshold, n."""
    rows = []
    for d, ev in evaluations.items():
        for m, r in ev.results.items():
            rows.append(
                {"dataset": d, "method": m, "kind": ev.methods[m].kind, "f1": r.f1, "f1_lo": r.f1_ci[0],
                 "f1_hi": r.f1_ci[1], "auroc": r.auroc, "auroc_lo": r.auroc_ci[0], "auroc_hi": r.auroc_ci[1],
                 "precision": r.precision, "recall": r.recall, "threshold": r.threshold, "n": r.n,
                 "n_positive": r.n_positive, "n_groups": r.n_groups}
            )  # fmt: skip
    return rows


def main_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """Wide table of `main_rows`: methods as rows, datasets as column pairs (F1 / AUROC with intervals)."""
    ds = list(dict.fromkeys(r["dataset"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    idx = {(r["dataset"], r["method"]): r for r in rows}
    head = ["method"] + [f"{_name(d)} {k}" for d in ds for k in ("F1", "AUROC")]
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
        f"{_name(d)}: {idx[(d, methods[0])]['n']} answers / {idx[(d, methods[0])]['n_groups']} groups"
        for d in ds
    )
    return _md(head, body) + f"\nTest sets: {counts}.\n"


TEST_FAMILIES = (
    ("additions", "Adding attention blocks"),
    ("probe_vs_judge", "Probe vs the same model as judge"),
    ("vs_text_only", "Detectors vs text-only baselines on RAGTruth QA (AUROC)"),
)
"""Families of paired tests and their titles, in the order shown."""


def tests_rows(tests: Sequence[PairedTest]) -> list[dict]:
    """Flat CSV rows of paired tests (the interval as ``"lo;hi"``)."""
    return [
        {"family": t.family, "key": t.key, "dataset": t.dataset, "a": t.a, "b": t.b, "metric": t.metric,
         "delta": t.delta, "ci": f"{t.ci[0]:.4f};{t.ci[1]:.4f}", "p": t.p, "p_holm": t.p_holm}
        for t in tests
    ]  # fmt: skip


def tests_markdown(tests: Sequence[PairedTest]) -> str:
    """One table per family of `TEST_FAMILIES` (Δ = b − a with interval, raw and Holm p)."""
    lines = []
    for family, title in TEST_FAMILIES:
        items = [t for t in tests if t.family == family]
        if not items:
            continue
        lines.append(
            f"\n**{title}** (paired group bootstrap, Δ = b − a, Holm-corrected p within each family)\n\n"
        )
        body = [
            [_name(t.dataset), t.a, t.b, t.metric, f"{t.delta:+.3f} [{t.ci[0]:+.3f}, {t.ci[1]:+.3f}]",
             f"{t.p:.4f}", f"{t.p_holm if t.p_holm is not None else float('nan'):.4f}"]
            for t in items
        ]  # fmt: skip
        lines.append(_md(["dataset", "a", "b", "metric", "Δ [95% CI]", "p", "p (Holm)"], body))
    return "".join(lines)


def transfer_rows(transfers: Sequence[TransferResult]) -> list[dict]:
    """Flat CSV rows of transfer results (test AUROC with interval, F1, n)."""
    return [
        {"fit": t.fit, "test": t.test, "method": t.method, "auroc": t.result.auroc,
         "auroc_lo": t.result.auroc_ci[0], "auroc_hi": t.result.auroc_ci[1], "f1": t.result.f1,
         "n": t.result.n}
        for t in transfers
    ]  # fmt: skip


def transfer_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """One AUROC matrix (methods × test sets) per fitting dataset, from `transfer_rows`."""
    lines = []
    for fit in dict.fromkeys(r["fit"] for r in rows):
        sub = [r for r in rows if r["fit"] == fit]
        tests = list(dict.fromkeys(r["test"] for r in sub))
        idx = {(r["test"], r["method"]): r for r in sub}
        body = [
            [m] + [_ci(idx[t, m]["auroc"], (idx[t, m]["auroc_lo"], idx[t, m]["auroc_hi"])) if (t, m) in idx
                   else "" for t in tests]
            for m in dict.fromkeys(r["method"] for r in sub)
        ]  # fmt: skip
        lines.append(f"\n**Fitted on {_name(fit)}** (test AUROC [95% CI])\n\n")
        lines.append(_md(["method"] + [_name(t) for t in tests], body))
    return "".join(lines)


def localisation_markdown(rows: Sequence[Mapping[str, Any]], fits: Mapping[str, Mapping[str, Any]]) -> str:
    """Token AUROC and character span P/R/F1 per scorer and test set, then what validation chose."""
    body = [
        [r["method"], _name(r["task"]) if r["task"] != "all" else "all three tasks",
         _ci(r["token_auroc"], r["token_auroc_ci"]), f"{r['span_precision']:.3f}", f"{r['span_recall']:.3f}",
         _ci(r["span_f1"], r["span_f1_ci"]), f"{r['token_f1']:.3f}",
         f"{r['n_answers']} / {r['n_tokens']} ({r['n_positive_tokens']} pos.)"]
        for r in rows
    ]  # fmt: skip
    head = ["scorer", "test", "token AUROC [95% CI]", "span P", "span R", "span F1 [95% CI]", "token F1",
            "answers / tokens"]  # fmt: skip

    def choices(f: Mapping[str, Any], auroc: str = "validation") -> str:
        return (
            f"C = {f['C']}, {auroc} token AUROC {f['val_token_auroc']:.3f}, window {f['window']}, "
            f"smoothing {f['smooth']}, gap {f['gap']}, threshold {f['threshold']:.4g}"
        )

    def by_cv(f: Mapping[str, Any]) -> str:
        return f" (every choice by {f['folds']}-fold CV over train + validation)" if "folds" in f else ""

    chosen = "".join(
        f"\n- {name}: features {f.get('view', 'mean')}{by_cv(f)}, "
        + ("; ".join(f"{_name(t)}: {choices(c, 'out-of-fold' if 'folds' in f else 'validation')}"
                     for t, c in f["tasks"].items()) if "tasks" in f
           else choices(f))
        + (f", validation span F1 {f['val_span_f1']:.3f}" if "val_span_f1" in f else "")
        + (" (**the scorer chosen by validation span F1**)" if f.get("chosen") else "")
        + "."
        for name, f in fits.items()
    )  # fmt: skip
    return _md(head, body) + (
        "\nChosen on validation (or by cross-validation where said):\n" + chosen + "\n" if fits else ""
    )


def write_outputs(
    out: Path, runs: Mapping[str, Any], tests: Sequence[PairedTest], transfers: Sequence[TransferResult],
    localisation: Mapping[str, Any] | None, cost: Mapping[str, Any] | None, extract: Mapping[str, Any],
    judge: Mapping[str, Any] | None, *, proxy: str,
) -> None:  # fmt: skip
    """Write every table (CSV + Markdown), plot and JSON of an evaluation (`evaluate_dataset`) under ``out``.

    Files: ``main.csv``, ``tests.csv``, ``transfer.csv``, ``localisation.csv``, ``selection.json``,
    ``cost.json``, ``detection_roc.png``, ``detection_auroc_bars.png``, ``report.md`` and
    ``main_table.md``; every CSV row carries `environment`.

    Args:
        out: Results folder (created).
        runs: ``{dataset: halluprobe.evaluation.DatasetRun}``.
        tests: Paired tests with Holm's p (`halluprobe.evaluation._suite.grouped_tests`).
        transfers: Transfer results.
        localisation: `halluprobe.evaluation.localisation_runs` output, or None.
        cost: The cost phase's measurement, or None.
        extract: The extraction's record (device, dtype, backend, timings).
        judge: The judge phase's record (template, validation AUROCs), or None.
        proxy: Proxy description stamped on every row.
    """
    import json

    from halluprobe.evaluation._report import plot_auroc_bars, plot_roc_grid

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment(extract, proxy)
    rows = main_rows({d: r.evaluation for d, r in runs.items()})
    write_csv(out / "main.csv", rows, env)
    write_csv(out / "tests.csv", tests_rows(tests), env)
    xrows = transfer_rows(transfers)
    write_csv(out / "transfer.csv", xrows, env)
    if localisation:
        write_csv(out / "localisation.csv", localisation["results"], env)
    sel: dict[str, Any] = {
        d: {"feature_sets": r.selection, "best_probe_by_validation": r.best_probe} for d, r in runs.items()
    }
    if localisation:
        sel["localisation"] = localisation["fit"]
    if judge:
        names = {"template": "template", "mean_validation_auroc": "mean_auroc", "aurocs": "aurocs"}
        sel["judge"] = {k: judge[j] for k, j in names.items()}
    atomic_write_text(out / "selection.json", json.dumps(sel, indent=1, default=float), overwrite=True)
    record = {"extract": {k: v for k, v in extract.items() if k != "induction"}, "cost": cost}
    atomic_write_text(out / "cost.json", json.dumps(record, indent=1, default=float), overwrite=True)
    plots = {
        "detection_roc.png": lambda p: plot_roc_grid(
            p, {d: r.evaluation for d, r in runs.items()}, DATASET_NAMES
        ),
        "detection_auroc_bars.png": lambda p: plot_auroc_bars(p, rows, DATASET_NAMES),
    }
    for fname, draw in plots.items():
        try:
            draw(out / fname)
        except Exception as exc:  # noqa: BLE001 - a plot must not lose the tables
            print(f"report: plot {fname} failed: {exc!r}", flush=True)
    meta = "\n".join(f"- {k}: {v}" for k, v in env.items())
    parts = [
        f"# Detection results\n\n{meta}\n\n## Main table (test F1 at the validation threshold, AUROC; "
        "95% group-bootstrap intervals)\n\n", main_markdown(rows),
        "\n## Paired tests\n", tests_markdown(tests),
        "\n## Transfer\n", transfer_markdown(xrows), "\n## Token-level localisation (RAGTruth spans)\n\n",
        localisation_markdown(localisation["results"], localisation["fit"])
        if localisation else "(failed; see the log)\n",
        "\n## Extraction cost\n\n", cost_markdown(cost, extract),
    ]  # fmt: skip
    if judge:
        parts.append(f"\n## Judge template selection (validation AUROC)\n\n{judge_markdown(judge)}")
    atomic_write_text(out / "report.md", "".join(parts), overwrite=True)
    atomic_write_text(out / "main_table.md", main_markdown(rows), overwrite=True)


def _change(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None, key: str) -> str:
    if old is None:
        return f"— → {new[key]:.3f} (new)" if new else "—"
    if new is None:
        return f"{old[key]:.3f} → — (gone)"
    return f"{old[key]:.3f} → {new[key]:.3f} ({new[key] - old[key]:+.3f})"


def compare_markdown(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]]) -> str:
    """Per (dataset, method) of two `main_rows` lists: test F1 and AUROC old → new (difference)."""
    a = {(r["dataset"], r["method"]): r for r in old}
    b = {(r["dataset"], r["method"]): r for r in new}
    lines = ["| dataset | method | F1 old → new (Δ) | AUROC old → new (Δ) |", "|---|---|---|---|"]
    for key in dict.fromkeys([*a, *b]):
        o, n = a.get(key), b.get(key)
        lines.append(f"| {key[0]} | {key[1]} | {_change(o, n, 'f1')} | {_change(o, n, 'auroc')} |")
    return "\n".join(lines) + "\n"


def rebuild_report(folder: Path) -> None:
    """Rewrite a results folder's ``main_table.md``, AUROC bars, ``cost.md`` and ``judge_selection.md``.

    From its ``main.csv``, ``extract.json``, ``cost.json`` and ``judge.json`` alone: for a run whose
    analysis wrote those but stopped before its report.
    """
    import json

    from halluprobe.evaluation._report import plot_auroc_bars

    rows = read_csv(folder / "main.csv")
    atomic_write_text(folder / "main_table.md", main_markdown(rows), overwrite=True)
    plot_auroc_bars(folder / "detection_auroc_bars.png", rows, DATASET_NAMES)
    extract, cost = (json.loads((folder / f).read_text()) for f in ("extract.json", "cost.json"))
    atomic_write_text(folder / "cost.md", cost_markdown(cost, extract), overwrite=True)
    judge = json.loads((folder / "judge.json").read_text())
    atomic_write_text(folder / "judge_selection.md", judge_markdown(judge), overwrite=True)
