"""Evaluation: typed results, paired tests, transfer, every method on several datasets, tables and plots.

Names are imported on first use: importing this package does not import torch or scikit-learn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluprobe import _lazy

if TYPE_CHECKING:
    from halluprobe.evaluation._evaluation import (
        DatasetEvaluation,
        MethodScores,
        PairedTest,
        TransferResult,
        evaluate_methods,
        holm_families,
        paired_test,
        results_document,
        transfer,
        write_results,
    )
    from halluprobe.evaluation._suite import DatasetRun, evaluate_dataset, localisation_runs
    from halluprobe.evaluation._tables import write_outputs
    from halluprobe.evaluation._transfer import leave_one_source_out
    from halluprobe.evaluation._transfer_table import TransferRow, TransferSummary, TransferTable

_EXPORTS = {
    "_evaluation": (
        "DatasetEvaluation",
        "MethodScores",
        "PairedTest",
        "TransferResult",
        "evaluate_methods",
        "holm_families",
        "paired_test",
        "results_document",
        "transfer",
        "write_results",
    ),
    "_suite": ("DatasetRun", "evaluate_dataset", "localisation_runs"),
    "_tables": ("write_outputs",),
    "_transfer": ("leave_one_source_out",),
    "_transfer_table": ("TransferRow", "TransferSummary", "TransferTable"),
}

__all__ = [
    "DatasetEvaluation",
    "DatasetRun",
    "MethodScores",
    "PairedTest",
    "TransferResult",
    "TransferRow",
    "TransferSummary",
    "TransferTable",
    "evaluate_dataset",
    "evaluate_methods",
    "holm_families",
    "leave_one_source_out",
    "localisation_runs",
    "paired_test",
    "results_document",
    "transfer",
    "write_outputs",
    "write_results",
]

__getattr__, __dir__ = _lazy.attach(__name__, _EXPORTS, legacy="_evaluation")
