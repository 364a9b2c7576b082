"""Compact per-example records reduced from one batch's [`ForwardStats`][flashstats_hf.ForwardStats].

A record keeps what every feature block and detector of this package reads, pooled over the answer
tokens (mean, standard deviation, minimum, maximum), plus the few per-token series that the
unsupervised detectors and the per-token scores need. It is small (tens of KiB) whatever the
context length, so a dataset's records fit a cache of shards.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING

import numpy as np
import torch
from flashstats_hf.pooling import POOL_NAMES, pool_tokens

if TYPE_CHECKING:
    from flashstats_hf.types import ForwardStats

HEAD_STATS: tuple[str, ...] = (
    "max_weight",
    "effective_support",
    "entropy",
    "lookback_ratio",
    "normalized_entropy",
    "prev_weight",
    "diag_log",
    "bos_sink",
)
"""Per-token, per-head statistics, in [`head_stats`][halluprobe.ExampleRecord.head_stats] order."""

POOLS: tuple[str, ...] = POOL_NAMES
"""Poolings over answer tokens, in the order of the last axis of pooled arrays (``flashstats_hf``)."""

HEAD_FEATURES: tuple[str, ...] = tuple(f"{s}.{p}" for s in HEAD_STATS for p in POOLS)
"""Every pooled head statistic ``"<statistic>.<pool>"`` (what an A7 block and a detector's reads accept)."""

MAX_SINKS = 10
"""Largest sink count ``k`` kept per head (the protocol searches ``k`` in ``1..MAX_SINKS``)."""


@dataclass
class ExampleRecord:
    """What one example contributes to the feature blocks (numpy, float32).

    Shapes: ``NL`` scored layers, ``H`` query heads, ``A`` answer tokens, ``V`` logit statistics,
    ``NH`` kept hidden layers, ``Dm`` model width.
    """

    id: str
    """Example id."""
    answer_len: int
    """Number of answer tokens ``A``."""
    prompt_len: int
    """Number of real tokens before the answer."""
    head_stats: np.ndarray
    """``[NL, H, len(HEAD_STATS), 4]``: each head statistic pooled over answer tokens (see ``POOLS``)."""
    sink_topk: np.ndarray
    """``[NL, H, MAX_SINKS]``: the largest normalized column sums ``c̄_j`` of each head, descending."""
    token_prev: np.ndarray
    """``[NL, H, A]``: previous-token weight of every head at every answer token (RAUQ)."""
    logit_pooled: np.ndarray
    """``[V, 4]``: per-token logit statistics pooled over answer tokens."""
    token_logit: np.ndarray
    """``[A, V]``: per-token logit statistics."""
    hidden_pooled: np.ndarray
    """``[NH, 2, Dm]``: mean and standard deviation over answer tokens of the kept hidden states."""
    mtopdiv: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    """``[NL, H]``: TOHA's MTopDiv of each head (empty unless TOHA was requested)."""
    grounding: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    """``[G]``: text-only grounding features of the example (``halubench_data.grounding``, in
    ``GROUNDING_FEATURES`` order); empty when the record was made without them (see
    `halluprobe.features._grounding.fill_grounding`)."""
    contrast: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.float32))
    """``[A, 2]``: each answer token's log-probability with the context and without it (the question
    alone; `halluprobe.features._contrast.fill_contrast`); empty when the record was made without it."""


def pool(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Pool a per-token quantity over the answer tokens where ``mask`` is True.

    Args:
        values: ``[..., A] float``. The per-token values.
        mask: ``[A] bool``. Which tokens exist (at least one must).

    Returns:
        ``[..., 4] float32``: mean, population standard deviation, minimum and maximum.
    """
    if not bool(mask.any()):
        raise ValueError("pool needs at least one answer token; got an empty answer mask")
    return pool_tokens(values[..., mask].double(), -1).float()


def lookback_ratio(prompt_mass: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Lookback ratio of Lookback Lens from prompt mass, per answer token of one example.

    A thin adapter of [`flashstats_kernels.features.lookback_ratio`][flashstats_kernels.lookback_ratio] to one
    unpadded example: the mean weight per prompt key is ``m / P``, the mean weight per visible response key of
    answer token ``a`` (0-based, its own position included) is ``(1 - m) / (a + 1)``, and the ratio is the
    first over their sum.

    Args:
        prompt_mass: ``[..., A] float32``. Share of attention each answer row puts on the prompt.
        prompt_len: Number of prompt keys ``P`` (>= 1).

    Returns:
        ``[..., A] float32`` in ``[0, 1]``; higher means the row looks back at the context more.
    """
    from flashstats_kernels.features import lookback_ratio as kernel_lookback_ratio

    if prompt_len < 1:
        raise ValueError(f"lookback_ratio needs prompt_len >= 1, got {prompt_len}")
    shape = prompt_mass.shape
    rows = shape[-1]
    flat = prompt_mass.reshape(1, -1, rows).float()
    out = kernel_lookback_ratio(flat, prompt_len=int(prompt_len), keys=int(prompt_len) + rows)
    return out.reshape(shape)


def head_series(fs, b: int, length: int) -> torch.Tensor:
    """``[NL, H, len(HEAD_STATS), A_b] float32`` (CPU) per-token head statistics of example ``b``.

    Args:
        fs: A [`flashstats_hf.types.ForwardStats`][flashstats_hf.ForwardStats] with rows and lookups.
        b: Example index in the batch.
        length: Its answer length ``A_b``.
    """
    if fs.rows is None or fs.lookups is None:
        raise ValueError("ForwardStats needs rows (T1) and lookups (T2) for the head statistics")
    r, lk = fs.rows, fs.lookups
    cut = slice(0, length)
    prompt_len = int(fs.prompt_len[b])
    series = [
        r.max_weight[b, ..., cut],
        r.effective_support[b, ..., cut],
        r.entropy[b, ..., cut],
        lookback_ratio(r.prompt_mass[b, ..., cut], prompt_len),
        r.normalized_entropy[b, ..., cut],
        lk.prev_weight[b, ..., cut],
        lk.diag_log[b, ..., cut],
        lk.sink_weights[b, ..., cut, 0],
    ]
    return torch.stack([s.float().cpu() for s in series], 2)


def _sink_topk(fs, b: int) -> torch.Tensor:
    """``[NL, H, MAX_SINKS]`` the largest ``c̄_j`` over real keys, descending (zero-padded).

    Read from the columns the forward reduced (``fs.column_topk``), or from the full column means when
    the forward kept them; both give the same values.
    """
    if fs.column_topk is not None:
        top = fs.column_topk.values[b].float().cpu()
        if top.shape[-1] < MAX_SINKS:
            raise ValueError(
                f"the forward kept {top.shape[-1]} column means per head; the sink values need "
                f"{MAX_SINKS} (record_forward(..., column_topk={MAX_SINKS}) or more)"
            )
        return top[..., :MAX_SINKS].contiguous()
    if fs.columns is None:
        raise ValueError("ForwardStats needs columns (T3) for the sink values")
    mean = fs.columns.mean[b].float().cpu()
    keys = fs.key_mask[b].cpu()
    vals = mean[..., keys]
    k = min(MAX_SINKS, vals.shape[-1])
    top = vals.topk(k, dim=-1).values
    if k < MAX_SINKS:
        top = torch.nn.functional.pad(top, (0, MAX_SINKS - k))
    return top


def on_host(fs: ForwardStats) -> ForwardStats:
    """``fs`` with every tensor a record reads copied to the CPU at once (one copy per tensor).

    Reducing a batch example by example from the GPU reads each statistic back once per example and waits
    on the device each time; after this the per-example work only slices host memory. The dense blocks
    (T4) stay where they are. A ForwardStats already on the CPU comes back as it is.
    """
    if fs.answer_len.device.type == "cpu":
        return fs

    def host(family):
        if family is None:
            return None
        return type(family)(*(getattr(family, f.name).cpu() for f in fields(family)))

    def cpu(x):
        return None if x is None else x.cpu()

    return replace(
        fs, rows=host(fs.rows), lookups=host(fs.lookups), columns=host(fs.columns),
        column_topk=host(fs.column_topk), logit_stats=cpu(fs.logit_stats), hidden=cpu(fs.hidden),
        answer_mask=fs.answer_mask.cpu(), answer_len=fs.answer_len.cpu(), prompt_len=fs.prompt_len.cpu(),
        key_mask=fs.key_mask.cpu(), response_start=cpu(fs.response_start),
    )  # fmt: skip


def reduce_forward(
    fs: ForwardStats, ids: list[str], mtopdiv: torch.Tensor | None = None
) -> list[ExampleRecord]:
    """Reduce one batch's ForwardStats to one [`ExampleRecord`][halluprobe.ExampleRecord] per example.

    Args:
        fs: A [`flashstats_hf.types.ForwardStats`][flashstats_hf.ForwardStats] with rows, lookups (first sink
            = the first real key), columns, logit statistics and hidden states.
        ids: The ``B`` example ids, in batch order.
        mtopdiv: Optional ``[B, NL, H] float32`` TOHA values of every head.

    Returns:
        ``B`` records in batch order.
    """
    fs = on_host(fs)
    n = int(fs.answer_len.shape[0])
    if len(ids) != n:
        raise ValueError(f"reduce_forward needs one id per example: {n} examples, {len(ids)} ids")
    if fs.logit_stats is None or fs.hidden is None:
        raise ValueError("ForwardStats needs logit_stats and hidden for a record")
    out = []
    for b in range(n):
        length = int(fs.answer_len[b])
        mask = torch.ones(length, dtype=torch.bool)
        series = head_series(fs, b, length)
        token_logit = fs.logit_stats[b, :length].float().cpu()
        hid = fs.hidden[b, :, :length].float().cpu()
        hidden = torch.stack([hid.mean(1), hid.std(1, correction=0)], 1)
        out.append(
            ExampleRecord(
                id=ids[b],
                answer_len=length,
                prompt_len=int(fs.prompt_len[b]),
                head_stats=pool(series, mask).numpy(),
                sink_topk=_sink_topk(fs, b).numpy(),
                token_prev=series[:, :, HEAD_STATS.index("prev_weight")].numpy(),
                logit_pooled=pool(token_logit.T, mask).numpy(),
                token_logit=token_logit.numpy(),
                hidden_pooled=hidden.numpy(),
                mtopdiv=(mtopdiv[b].float().cpu().numpy() if mtopdiv is not None else np.zeros((0, 0))),
            )
        )
    return out


def token_records(fs, b: int, record: ExampleRecord) -> list[ExampleRecord]:
    """One pseudo-record per answer token of example ``b``, for per-token scores.

    Each copy of ``record`` has every *mean*-pooled quantity (head statistics, logit statistics,
    hidden-state mean) replaced by its value at that token, and the context contrast cut to that
    token; the other poolings keep the example's values. Every feature block is affine in the
    mean-pooled quantities (and C in the per-token contrast), so a linear probe's logits of these
    pseudo-records average exactly to the example's logit.
    """
    length = record.answer_len
    series = head_series(fs, b, length).numpy()  # [NL, H, F, A]
    hidden = fs.hidden[b, :, :length].float().cpu().numpy()  # [NH, A, Dm]
    out = []
    for t in range(length):
        hs = record.head_stats.copy()
        hs[..., 0] = series[..., t]
        lp = record.logit_pooled.copy()
        lp[:, 0] = record.token_logit[t]
        hp = record.hidden_pooled.copy()
        hp[:, 0] = hidden[:, t]
        contrast = record.contrast[t : t + 1] if len(record.contrast) else record.contrast
        out.append(
            replace(
                record,
                id=f"{record.id}#{t}",
                head_stats=hs,
                logit_pooled=lp,
                hidden_pooled=hp,
                contrast=contrast,
            )
        )
    return out
