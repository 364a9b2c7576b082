"""Shared pieces of the evaluation tables: display names, Markdown helpers, the cost and judge sections."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from halubench_data.metrics import markdown_table

DATASET_NAMES: dict[str, str] = {
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
"""Display names of the benchmark's datasets (others are shown as they are)."""


def _name(d: str) -> str:
    return DATASET_NAMES.get(d, d)


def _md(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    return markdown_table(header, rows) + "\n"


def _ci(v: float, ci: Sequence[float]) -> str:
    return f"{v:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def cost_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per path, the mean and median seconds and mean and max peak MiB of per-example timing rows.

    ``rows``: one dict per example with ``<path>_s`` (seconds) and ``<path>_bytes`` (peak extra bytes,
    None where not measured) for every path; the ``"paths"`` of a ``cost.json`` (`cost_markdown`).
    """
    import numpy as np

    out: dict[str, dict[str, float | None]] = {}
    for name in [k[:-2] for k in rows[0] if k.endswith("_s")]:
        s = np.array([r[f"{name}_s"] for r in rows], dtype=np.float64)
        mem = [r[f"{name}_bytes"] for r in rows]
        measured = mem[0] is not None
        out[name] = {
            "seconds_mean": float(s.mean()), "seconds_median": float(np.median(s)),
            "peak_mib_mean": float(np.mean(mem)) / 2**20 if measured else None,
            "peak_mib_max": float(np.max(mem)) / 2**20 if measured else None,
        }  # fmt: skip
    return out


def cost_markdown(cost: Mapping[str, Any] | None, extract: Mapping[str, Any] | None) -> str:
    """The extraction's throughput and, when measured, the per-example cost of each forward path."""
    lines = []
    if extract:
        peak = extract.get("peak_gpu_bytes")
        lines.append(
            f"Whole evaluation: {extract['examples_computed']} forwards, "
            f"{extract['seconds_per_example']:.3f} s per example (batch {extract['batch_size']}, "
            f"{extract['device']}"
            + (f", {extract['dtype']}, backend {extract['backend']}), peak GPU memory {peak / 2**20:.0f} MiB"
               if peak else ")")
            + ".\n\n"
        )  # fmt: skip
        lines.append(_repeatability(extract))
    if cost:
        body = [
            [p, f"{v['seconds_mean'] * 1e3:.1f}", f"{v['seconds_median'] * 1e3:.1f}",
             "n/a" if v["peak_mib_mean"] is None else f"{v['peak_mib_mean']:.1f}",
             "n/a" if v["peak_mib_max"] is None else f"{v['peak_mib_max']:.1f}"]
            for p, v in cost["paths"].items()
        ]  # fmt: skip
        lines.append(
            f"Sample: {cost['n']} RAGTruth QA test answers, batch 1, "
            f"median {cost['tokens_median']:.0f} tokens "
            f"(max {cost['tokens_max']}), {cost['device']}, {cost['dtype']}.\n\n"
        )
        head = ["path", "ms / example (mean)", "ms (median)", "peak extra MiB (mean)", "peak extra MiB (max)"]
        lines.append(_md(head, body))
    return "".join(lines)


def _repeatability(extract: Mapping[str, Any]) -> str:
    """Whether a rerun repeats the extraction bit for bit (``extract["deterministic"]``).

    GPU runs without the key were autotuned: they predate it.
    """
    det = extract.get("deterministic")
    if det is None and not extract.get("peak_gpu_bytes"):
        return ""
    if det:
        return (
            "The kernels ran with fixed tile configurations (`torch.use_deterministic_algorithms(True)`): "
            "a rerun on the same GPU and versions repeats every record bit for bit.\n\n"
        )
    return (
        "The kernels were autotuned: a rerun may keep other tile configurations, which move the records in "
        "their last bits and, through them, validation choices and metrics by up to a few hundredths (see "
        "Reproducibility on the performance page); without `--autotune` (the default now) a rerun repeats "
        "bit for bit.\n\n"
    )


def judge_markdown(judge: Mapping[str, Any]) -> str:
    """Validation AUROC of every judge template per dataset, and the one chosen."""
    first = next(iter(judge["aurocs"].values()))
    table = _md(
        ["template"] + [_name(d) for d in first],
        [[t] + [f"{v:.3f}" for v in per.values()] for t, per in judge["aurocs"].items()],
    )
    return f"Chosen: {judge['template']} (mean validation AUROC {judge['mean_auroc']:.3f})\n\n{table}"
