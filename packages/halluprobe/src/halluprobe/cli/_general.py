"""The flags of ``halluprobe train --general`` (`add_general_args`); `halluprobe.pipeline` runs it."""

from __future__ import annotations

from pathlib import Path


def add_general_args(p) -> None:
    """Adds ``--general`` and its options (``--jobs``, ``--threshold-rule``, ``--cache``) to ``p``."""
    p.add_argument(
        "--general", action="store_true",
        help="train one general detector on every --dataset (repeat the flag): equal weight per source, "
        "the candidate (--feature-sets) chosen by leave-one-source-out AUROC, calibrated on the pooled "
        "validation splits; writes OUT/detector and OUT/general.json",
    )  # fmt: skip
    p.add_argument(
        "--jobs", type=int, default=None,
        help="--general: held-out sources fitted at once, each in its own process (default 1; the detector "
        "is the same)",
    )  # fmt: skip
    p.add_argument(
        "--threshold-rule", default=None, metavar="RULE",
        help="--general: how the threshold is chosen on the validation splits: false-alarm@R (the lowest "
        "threshold that flags at most the share R of each source's supported answers, on average, so that "
        "one answer at a time is not mostly called hallucinated; default false-alarm@0.2), mean-f1 (the "
        "best mean F1 over sources) or calibrated-0.5",
    )  # fmt: skip
    p.add_argument(
        "--cache", action="append", type=Path, default=None, metavar="DIR",
        help="--general: another feature-cache folder (repeatable; e.g. OUT/cache of an earlier `halluprobe "
        "extract`) whose records of the same proxy settings are reused, grounding features added",
    )  # fmt: skip
