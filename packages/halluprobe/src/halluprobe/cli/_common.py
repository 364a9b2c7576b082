"""Helpers that several ``halluprobe`` commands share (the command modules import them from here)."""

from __future__ import annotations

from halubench_data import clikit

from halluprobe.pipeline._options import parse_layers  # noqa: F401 (the commands import it from here)

DEFAULT_TRAIN_LIMIT = clikit.AUTO_LIMIT
"""Examples per split used by ``--limit auto`` on the default dataset (keeps ``train`` under 10 minutes)."""


DETECTOR_HELP = (
    "folder of a saved detector (default: the general detector packaged with halluprobe, or the folder "
    "named by $HALLUPROBE_DETECTOR)"
)
"""Help of the optional detector argument of ``predict`` and ``stream``."""


def load_detector(path: str | None):
    """The detector of a ``predict`` / ``stream`` call; says on stderr which one when none was named."""
    from halluprobe.detectors._default import default_path, load

    det = load(path)
    if path is None:
        folder, how = default_path()
        clikit.status(f"detector: {how} ({folder}, {det.probe_.feature_set})")
    return det


def parse_limit(text: str | None, dataset: str) -> int | None:
    """``--limit`` as a number of examples per split, or ``None`` for no limit.

    As every CLI reads it (`halubench_data.clikit.parse_limit`): ``auto`` is `DEFAULT_TRAIN_LIMIT` on
    the default dataset and no limit otherwise.
    """
    return clikit.parse_limit(text, dataset=dataset)


def load_proxy(load_model, proxy: str | None, device: str):
    """``load_model(proxy)`` with a named ``--proxy`` error for a missing folder or unloadable weights."""
    with clikit.loading_model("--proxy", proxy or "the default SmolLM2"):
        return load_model(proxy, device=device)


def check_sizes(args) -> None:
    """``--batch-size`` and ``--token-budget`` (`_add_data_args`) are positive, or `clikit.UsageError`."""
    for flag in ("batch_size", "token_budget"):
        if getattr(args, flag) < 1:
            raise clikit.UsageError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
