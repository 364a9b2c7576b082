"""What a saved detector reads, and a forward that computes only that.

A detector's blocks name what they read from a record: A7 its heads' statistics (so their layers,
T1 for row statistics, T2 for lookups), A64 the T3 column sums of every scored layer, H64 one kept
hidden layer, L9 the logit statistics, C the logit statistics and a second forward without the
context; a token probe reads every scored layer's head statistics, the
logit statistics and, with a ``+hidden`` view, the hidden states.
[`detector_reads`][halluprobe.features._reads.detector_reads] derives it from the saved detector;
[`record_reads`][halluprobe.features._reads.record_reads] runs the forward with that request alone (no T3
pass when no column is read, only the layers read scored, no logits when none are read, and the
decoder stack stopped after the last layer read) and fills what was not computed with NaN, so the
result has the shapes of a full extraction and equals it on everything the detector reads. A NaN
that reaches a score is refused by `Detector.score_records`, never used.
[`stopped_proxy`][halluprobe.features._reads.stopped_proxy] gives recorders that always run the whole
decoder stack (`flashstats_hf.GraphedRecorder`) a view of the proxy that ends after the last layer read.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from halluprobe.features._records import HEAD_FEATURES

if TYPE_CHECKING:
    from flashstats_hf.types import ForwardStats

_LOOKUP_STATS = ("prev_weight", "diag_log", "bos_sink")
"""Head statistics that come from the T2 lookups; the others are T1 row statistics."""


@dataclass(frozen=True)
class DetectorReads:
    """The part of a full extraction that a detector reads (see the module docstring)."""

    layers: tuple[int, ...]
    """Decoder layers whose attention statistics are read (a subset of the scored layers)."""
    lookups: bool
    """T2: previous-token weight, log-diagonal, sink weight."""
    columns: bool
    """T3: column sums (A64's sink values)."""
    logits: bool
    """The logit statistics."""
    hidden_layers: tuple[int, ...]
    """Kept hidden states read (a subset of the detector's hidden layers)."""
    contrast: bool = False
    """The context contrast (block C): a second, plain forward without the context (needs ``logits``)."""

    def describe(self) -> dict[str, Any]:
        """JSON-able summary (the server's detector card)."""
        tiers = ["T1"] * bool(self.layers) + ["T2"] * self.lookups + ["T3"] * self.columns
        return {
            "layers": list(self.layers), "tiers": tiers, "logits": self.logits,
            "hidden_layers": list(self.hidden_layers), "contrast": self.contrast,
        }  # fmt: skip


def detector_reads(detector: Any, n_layers: int, n_heads: int) -> DetectorReads:
    """What ``detector`` reads from a proxy of ``n_layers`` decoder layers and ``n_heads`` query heads."""
    scored = tuple(range(n_layers)) if detector.layers is None else detector.layers
    layers: set[int] = set()
    stats: set[str] = set()
    columns = logits = contrast = False
    hidden: set[int] = set()
    for block in detector.probe_.blocks:
        cfg = block.config
        if block.name == "A7":
            layers.update(scored[int(h) // n_heads] for h in cfg["heads"])
            stats.update(f.split(".")[0] for f in cfg["features"])
        elif block.name == "A64":
            layers.update(scored)
            columns = True
        elif block.name == "H64":
            hidden.add(detector.hidden_layers_[int(cfg["layer"])])
        elif block.name == "L9":
            logits = True
        elif block.name == "C":  # the with-context log-probabilities come from the logit statistics
            logits = contrast = True
    probe = detector.token_probe_
    if probe is not None:
        layers.update(scored)
        stats.update(f.split(".")[0] for f in HEAD_FEATURES)
        logits = True
        if probe.view.endswith("+hidden"):
            hidden.update(detector.hidden_layers_)
    return DetectorReads(
        layers=tuple(sorted(layers)), lookups=bool(stats & set(_LOOKUP_STATS)), columns=columns,
        logits=logits, hidden_layers=tuple(sorted(hidden)), contrast=contrast,
    )  # fmt: skip


def record_reads(model: Any, batch: Any, reads: DetectorReads, scored: tuple[int, ...], kept: tuple[int, ...],
                 backend: str = "auto") -> ForwardStats:  # fmt: skip
    """One recorded forward of a collated ``batch`` that computes only ``reads``, completed with NaN.

    Args:
        model: The proxy (``"attnstats"`` attention, eval mode).
        batch: A `flashstats_hf.collate` batch on the model's device.
        reads: What to compute (`detector_reads`).
        scored: The layers a full extraction scores (the detector's layers).
        kept: The hidden layers a full extraction keeps.
        backend: Kernel backend of `flashstats_hf.record_forward`.

    Returns:
        A ForwardStats with the layers, hidden layers and families of a full extraction; what
        ``reads`` leaves out is NaN.
    """
    from flashstats_hf import DEFAULT_REQUEST, record_forward

    request = dataclasses.replace(DEFAULT_REQUEST, lookups=reads.lookups, columns=reads.columns)
    fs = record_forward(
        model, batch.input_ids, response_start=batch.response_start, attention_mask=batch.attention_mask,
        request=request, layers=reads.layers, logits=reads.logits, hidden_layers=reads.hidden_layers,
        backend=backend,
    )  # fmt: skip
    return complete(fs, scored, kept, int(model.config.num_attention_heads), int(model.config.hidden_size))


def stopped_proxy(model: Any, reads: DetectorReads) -> Any:
    """``model``, or a view of it whose decoder stack ends after the last layer ``reads`` needs.

    The view shares every parameter and layer with ``model`` (nothing is copied but the two module
    dicts on the path to the decoder list, which is cut); ``model`` itself is left as it was. A recorder
    built on the view (for example `flashstats_hf.GraphedRecorder`, which captures the whole stack)
    records the read layers and hidden states exactly as on ``model``. ``model`` comes back unchanged
    when nothing can be cut: the logit statistics are read (they need the last layer), the final
    normed state is a kept hidden layer, the last layer is read, or the decoder list is not a direct
    child of the body.

    Args:
        model: The proxy (a Transformers causal LM).
        reads: What is read (`detector_reads`); hidden layer ``k`` is the output of layer ``k - 1``.
    """
    from flashstats_hf._inputs import _decoder

    body, layers = _decoder(model)
    n = len(layers)
    # hidden k is taken by a hook on layer k - 1 only while k < the stack's length (k == length is the
    # body's normed output), so the view keeps layer k too
    keep = max([*(i + 1 for i in reads.layers), *(k + 1 for k in reads.hidden_layers)], default=n)
    names = [k for k, v in body._modules.items() if v is layers]
    bodies = [k for k, v in model._modules.items() if v is body]
    if reads.logits or keep >= n or len(names) != 1 or (body is not model and len(bodies) != 1):
        return model
    cut = _shallow(body, {names[0]: torch.nn.ModuleList(list(layers)[:keep])})
    return cut if body is model else _shallow(model, {bodies[0]: cut})


def _shallow(module: torch.nn.Module, children: dict[str, torch.nn.Module]) -> torch.nn.Module:
    """A copy of ``module`` sharing its parameters, with ``children`` replaced and hooks of its own."""
    out = copy.copy(module)
    for name, value in vars(module).items():
        if name.startswith("_") and "hooks" in name and isinstance(value, dict):
            out.__dict__[name] = type(value)(value)  # hooks put on the view stay off ``module``
    out.__dict__["_modules"] = {**module._modules, **children}
    return out


def complete(
    fs: ForwardStats, scored: tuple[int, ...], kept: tuple[int, ...], n_heads: int, width: int
) -> ForwardStats:
    """``fs`` widened to the ``scored`` layers and ``kept`` hidden layers of a full extraction (NaN).

    ``n_heads`` and ``width`` (the model's query heads and hidden size) shape what was not computed.
    """
    from flashstats_hf import COLUMN_TOPK, LOGIT_STAT_NAMES, ColumnTopK
    from flashstats_kernels.types import ColumnStats, LookupStats, RowStats

    b, a = fs.answer_mask.shape
    length = fs.key_mask.shape[1]
    dev = fs.answer_mask.device
    where = [scored.index(i) for i in fs.layers]

    def widen(family, kind, last: tuple[int, ...]):
        fields = [f.name for f in dataclasses.fields(kind)]
        out = []
        for name in fields:
            src = None if family is None else getattr(family, name)
            shape = (b, len(scored), n_heads, *last) if src is None else (b, len(scored), *src.shape[2:])
            full = torch.full(shape, float("nan"), device=dev)
            if src is not None:
                full[:, where] = src.float()
            out.append(full)
        return kind(*out)

    hidden = None
    if kept:
        hidden = torch.full((b, len(kept), a, width), float("nan"), device=dev)
        for j, i in enumerate(fs.hidden_layers):
            hidden[:, kept.index(i)] = fs.hidden[:, j]  # type: ignore[index]
    logit_stats = fs.logit_stats
    if logit_stats is None:
        logit_stats = torch.full((b, a, len(LOGIT_STAT_NAMES)), float("nan"), device=dev)
    top = None
    if fs.columns is None:  # reduced columns (or none read): NaN values, index -1, where not computed
        values = torch.full((b, len(scored), n_heads, COLUMN_TOPK), float("nan"), device=dev)
        index = torch.full(values.shape, -1, dtype=torch.int64, device=dev)
        if fs.column_topk is not None:
            got = fs.column_topk
            values = torch.full((b, len(scored), *got.values.shape[2:]), float("nan"), device=dev)
            index = torch.full(values.shape, -1, dtype=torch.int64, device=dev)
            values[:, where], index[:, where] = got.values.float(), got.index
        top = ColumnTopK(values, index)
    return dataclasses.replace(
        fs, layers=tuple(scored), rows=widen(fs.rows, RowStats, (a,)), column_topk=top,
        lookups=widen(_no_lookups(b, len(fs.layers), n_heads, a, dev) if fs.lookups is None else fs.lookups,
                      LookupStats, (a,)),
        columns=None if fs.columns is None else widen(fs.columns, ColumnStats, (length,)),
        logit_stats=logit_stats,
        logit_stat_names=LOGIT_STAT_NAMES, hidden_layers=tuple(kept), hidden=hidden,
    )  # fmt: skip


def _no_lookups(b: int, nl: int, n_heads: int, a: int, dev: torch.device) -> Any:
    """NaN lookups of ``nl`` layers (one sink), as a forward without T2 would have them."""
    from flashstats_kernels.types import LookupStats

    rows = torch.full((b, nl, n_heads, a), float("nan"), device=dev)
    return LookupStats(rows, rows.clone(), rows[..., None].clone())
