"""The calibration section of the ``halluprobe train`` report: ECE per probe and a reliability diagram."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from halluprobe.training._calibration import plot_reliability, reliability_curve


def calibration_section(out: Path, test_probs: Mapping[str, np.ndarray], y_test: np.ndarray) -> str:
    """Write ``out/reliability.png`` and return the report's Markdown section about it.

    Args:
        out: the report folder.
        test_probs: probe -> ``[n_test]`` calibrated test probabilities.
        y_test: ``[n_test]`` test labels (both classes).
    """
    curves = {name: reliability_curve(p, y_test) for name, p in test_probs.items()}
    plot_reliability(out / "reliability.png", curves, title="Reliability (test)")
    lines = [
        "",
        "## Calibration",
        "",
        "Probabilities are Platt-scaled on validation (sources weighted equally). Expected calibration",
        "error on test over 10 equal-mass bins (each bin holds the same number of answers):",
        "",
        "| feature set | test ECE |",
        "|---|---|",
        *(f"| {name} | {c.ece:.3f} |" for name, c in curves.items()),
        "",
        "![reliability](reliability.png)",
    ]
    return "\n".join(lines)
