"""`run`: one training run, its stages in order.

data → extraction → blocks → fit → calibration → threshold → save → report

1. **data**: `check_options` checks every option and reads the datasets and feature selections, before
   torch loads (`halluprobe.pipeline._options`).
2. **extraction**: the proxy loads once and every example gets its record, from a cache or one forward
   (`halluprobe.pipeline._extraction`).
3. **blocks, fit, calibration, threshold**: the fit stage of the run's kind (`FIT_STAGES`,
   `halluprobe.pipeline._fit`), which fits the feature blocks (`halluprobe.blocks`), the probes
   (`halluprobe.training._protocol`), their calibration and threshold (`halluprobe.training._calibration`).
4. **save**: the detectors, in the folder format of `halluprobe.Detector` (or the transfer table).
5. **report**: results, report and the summary the command prints.
"""

from __future__ import annotations

import os

from halubench_data import clikit

from halluprobe.pipeline._extraction import extract, start
from halluprobe.pipeline._fit import FIT_STAGES, Report
from halluprobe.pipeline._options import TrainOptions, check_options


def _describe(o: TrainOptions, datasets) -> str:
    if o.kind == "transfer":
        return f"sources: {', '.join(dict.fromkeys(e.source for ds in datasets for e in ds))}"
    return "\n".join(
        f"{'dataset' if o.kind == 'dataset' else 'source'} {ds.name}: {len(ds.train)} train, "
        f"{len(ds.validation)} validation" + (f", {len(ds.test)} test" if o.kind == "dataset" else "")
        for ds in datasets
    )


def run(o: TrainOptions) -> Report | None:
    """Run every stage of a training run; returns its report (None on the other processes of a torchrun).

    Raises:
        halubench_data.clikit.UsageError, ValueError, FileNotFoundError: an option or input that does
            not fit, before anything loads (`check_options`).
    """
    from halluprobe.training._calibration import degenerate_fit_lines

    stage = FIT_STAGES.get(o.kind)
    if stage is None:
        raise clikit.UsageError(f"unknown kind of run {o.kind!r}; expected one of {', '.join(FIT_STAGES)}")
    inputs = check_options(o)  # data
    device = start(o)
    if os.environ.get("RANK", "0") == "0":  # one process of a torchrun says it
        clikit.status(_describe(o, inputs.datasets))
    x = extract(o, inputs, device) if stage.reads(o) else None  # extraction
    if x is not None and not x.world.main:
        return None  # the first process of a torchrun fits and reports
    command = "halluprobe transfer" if o.kind == "transfer" else "halluprobe train"
    with degenerate_fit_lines(command):
        fitted = stage.fit(o, inputs, x)  # blocks → fit → calibration → threshold
    saved = fitted.save(o.out)  # save
    return fitted.report(o.out, saved)  # report
