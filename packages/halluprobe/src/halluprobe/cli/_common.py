"""Helpers that several ``halluprobe`` commands share (the command modules import them from here)."""

from __future__ import annotations

from halubench_data import clikit

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


MAX_LAYERS = 4096
"""Bound of ``--layers`` before the proxy's own layer count is known (more than any model has)."""


def parse_layers(text: str | None, n_layers: int | None = None) -> tuple[int, ...] | None:
    """``'0-3,7'`` -> ``(0, 1, 2, 3, 7)``; ``None`` -> ``None`` (all layers).

    Every bound is checked before a range is built: against ``n_layers`` (the proxy's layer count)
    when given, else against `MAX_LAYERS`, so ``0-100000000`` fails at once.
    """
    if text is None:
        return None
    bounds: list[tuple[int, int]] = []
    try:
        for part in text.split(","):
            lo, dash, hi = part.strip().partition("-")
            bounds.append((int(lo), int(hi if dash else lo)))
    except ValueError as exc:
        raise ValueError(f"--layers expects e.g. '0-11' or '3,5,7', got {text!r}") from exc
    limit = MAX_LAYERS if n_layers is None else n_layers
    for first, last in bounds:
        if not 0 <= first <= last:
            raise ValueError(f"--layers {text!r}: range {first}-{last} is empty or negative")
        if last >= limit:
            what = f"the proxy has {n_layers} layers (0-{n_layers - 1})" if n_layers else f"at most {limit}"
            raise ValueError(f"--layers {text!r}: layer {last} is out of range; {what}")
    return tuple(sorted({i for first, last in bounds for i in range(first, last + 1)}))


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
