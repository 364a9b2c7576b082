"""The T1 accumulator state of one row, and the associative merge of two states (Appendix C).

A state summarises the visible keys a row has seen so far, relative to their running maximum score
``m``. Two states over disjoint key sets merge exactly, so the keys of one row may be split across
kernel instances, devices or decoding steps (split-K) and merged afterwards. See
``docs/reference/exactness.md`` for the proof.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from flashstats_kernels.types import ColumnStats, RowStats


@dataclass
class RowState:
    """Online-softmax state plus the T1 accumulators. Every field has the row shape (e.g. ``[B, Hq, R]``)."""

    m: torch.Tensor
    """Maximum visible score (``-inf`` when no key was seen)."""
    l: torch.Tensor  # noqa: E741 (the paper's name)
    """``sum_j e^{s_j - m}`` over the visible keys."""
    a: torch.Tensor
    """``sum_j e^{s_j - m} s_j`` (entropy accumulator, unshifted score)."""
    q2: torch.Tensor
    """``sum_j e^{2 (s_j - m)}`` (squared weights)."""
    pm: torch.Tensor
    """``sum_{j < prompt_len} e^{s_j - m}`` (prompt mass)."""
    n: torch.Tensor
    """Number of visible keys."""


def row_state(scores: torch.Tensor, visible: torch.Tensor, is_prompt: torch.Tensor) -> RowState:
    """The state of one block of keys, computed directly.

    Args:
        scores: [..., K] float. scaled (soft-capped) scores of the block's keys.
        visible: [..., K] bool (broadcastable). which of those keys the row sees.
        is_prompt: [..., K] bool (broadcastable). which of them are prompt keys.

    Returns:
        RowState with fields of shape ``[...]``. As in the kernels (``SEMANTICS.md``), a ``-inf`` score
        at a visible key is a zero weight that still counts in ``n``, and a NaN or ``+inf`` one makes
        every accumulator NaN (``finalize_state`` then gives a NaN row, never a fully masked one).
    """
    n = visible.expand_as(scores).sum(-1).to(scores.dtype)
    s = scores.masked_fill(~visible, float("-inf"))
    if s.shape[-1] == 0:  # an empty block: the identity of merge_states
        s = torch.nn.functional.pad(s, (0, 1), value=float("-inf"))
    poison = torch.where((torch.isnan(s) | (s == float("inf"))).any(-1), float("nan"), 0.0)  # [...]
    m = s.amax(-1)
    shift = torch.where(torch.isfinite(m), m, 0.0)
    e = torch.exp(s - shift[..., None])  # 0 where not visible
    s_vis = torch.where(torch.isfinite(s), s, 0.0)
    return RowState(
        m=m + poison,
        l=e.sum(-1) + poison,
        a=(e * s_vis).sum(-1) + poison,
        q2=(e * e).sum(-1) + poison,
        pm=(e * is_prompt).sum(-1) + poison,
        n=n,
    )


def merge_states(x: RowState, y: RowState) -> RowState:
    """Merges the states of two disjoint key sets of the same rows (associative and commutative).

    With ``m = max(m_x, m_y)``: ``l = l_x e^{m_x - m} + l_y e^{m_y - m}``, likewise ``a`` and ``pm``;
    ``q2 = q2_x e^{2 (m_x - m)} + q2_y e^{2 (m_y - m)}``; ``n = n_x + n_y``. Both factors lie in
    ``[0, 1]``, so nothing overflows; an empty state (``m = -inf``) contributes nothing, a NaN one
    makes the merge NaN.

    Raises:
        TypeError: ``x`` or ``y`` is not a `RowState`.
        ValueError: the fields of ``x`` and ``y`` do not all have one shape (no broadcasting: the two
            states must describe the same rows).
    """
    _check_same_rows(x, y)
    m = torch.maximum(x.m, y.m)
    safe = torch.where(torch.isfinite(m), m, 0.0)
    fx = torch.where(torch.isfinite(x.m), torch.exp(x.m - safe), 0.0)
    fy = torch.where(torch.isfinite(y.m), torch.exp(y.m - safe), 0.0)
    return RowState(
        m=m,
        l=x.l * fx + y.l * fy,
        a=x.a * fx + y.a * fy,
        q2=x.q2 * fx * fx + y.q2 * fy * fy,
        pm=x.pm * fx + y.pm * fy,
        n=x.n + y.n,
    )


def finalize_state(state: RowState) -> tuple[torch.Tensor, RowStats]:
    """LSE and T1 statistics of a state; a row that saw no key gets ``lse = -inf`` and zeros.

    ``lse = m + log l``; entropy ``H = log l + m - a / l``; normalized entropy ``H / log n`` (0 when
    ``n <= 1``); prompt mass ``pm / l``; max weight ``1 / l``; effective support ``l^2 / q2``.

    Returns:
        ``(lse, RowStats)`` with the shape and dtype of the state's fields.
    """
    seen = state.l != 0  # l >= 0, or NaN on a NaN row (which stays NaN below)
    l_safe = torch.where(seen, state.l, 1.0)
    log_l = torch.log(l_safe)
    lse = torch.where(seen, state.m + log_l, float("-inf"))
    entropy = torch.where(seen, log_l + state.m - state.a / l_safe, 0.0)
    many = state.n > 1
    few = torch.where(torch.isnan(entropy), float("nan"), 0.0)  # 0 when n <= 1, but a NaN row stays NaN
    normalized = torch.where(many, entropy / torch.log(torch.where(many, state.n, 2.0)), few)
    stats = RowStats(
        entropy=entropy,
        normalized_entropy=normalized,
        prompt_mass=torch.where(seen, state.pm / l_safe, 0.0),
        max_weight=torch.where(seen, 1.0 / l_safe, 0.0),
        effective_support=torch.where(seen, l_safe * l_safe / torch.where(seen, state.q2, 1.0), 0.0),
    )
    return lse, stats


def _check_same_rows(x: object, y: object) -> None:
    """Raises unless ``x`` and ``y`` are `RowState` whose fields all have one shape."""
    for name, state in (("x", x), ("y", y)):
        if not isinstance(state, RowState):
            raise TypeError(f"merge_states needs two RowState, got {name} = {type(state).__name__}")
    names = [f.name for f in dataclasses.fields(RowState)]
    shapes = [{n: tuple(getattr(s, n).shape) for n in names} for s in (x, y)]
    if len({shape for fields in shapes for shape in fields.values()}) != 1:
        raise ValueError(
            "merge_states needs two states of the same rows (one shape for every field, no broadcasting), "
            f"got x {shapes[0]} and y {shapes[1]}"
        )


@dataclass
class ColumnState:
    """Running T3 state of a decoding stream: column sums and row counts over the rows seen so far.

    A row's weights are final once the row is computed, so the column statistics of a stream are sums
    over its rows, accumulated step by step ([`flashstats_kernels.decode_attention`][] adds each
    step's rows in place). ``L`` is the cache capacity; keys not yet written hold 0.
    """

    sum: torch.Tensor
    """``[B, Hq, L] float32``: ``sum_i p_ij`` over the counted rows seen so far."""
    count: torch.Tensor
    """``[B, L] float32``: number of counted rows seen so far that see key ``j`` (the same for every head)."""

    @classmethod
    def zeros(cls, batch: int, heads: int, keys: int, device: torch.device | str) -> ColumnState:
        """An empty state for ``batch`` examples, ``heads`` query heads and ``keys`` cache slots."""
        return cls(
            sum=torch.zeros(batch, heads, keys, dtype=torch.float32, device=device),
            count=torch.zeros(batch, keys, dtype=torch.float32, device=device),
        )

    def stats(self) -> ColumnStats:
        """Column sums and means (``sum / count``, 0 where no counted row saw the key): ``[B, Hq, L]``."""
        seen = self.count[:, None, :] > 0
        mean = torch.where(seen, self.sum / self.count.clamp(min=1.0)[:, None, :], 0.0)
        return ColumnStats(sum=self.sum.clone(), mean=mean)


@dataclass
class RowTargets:
    """Where a decoding call writes its per-row statistics in place: slots ``start .. start + R - 1``.

    A stream keeps one buffer of ``A`` answer slots per statistic; with targets,
    [`flashstats_kernels.decode_attention`][] writes each new row's T1 and T2 statistics straight into
    its slot (``start`` is read on the device, so a captured step needs no copy and no host value).
    Any strides; the caller keeps ``start + R <= A``.
    """

    start: torch.Tensor
    """``[1] int64`` on the device: the slot of the call's first row."""
    rows: torch.Tensor | None = None
    """``[5, B, Hq, A] float32``: the five `RowStats` fields in their order (needed with T1)."""
    diag_log: torch.Tensor | None = None
    """``[B, Hq, A] float32`` (needed with T2, as the two below)."""
    prev_weight: torch.Tensor | None = None
    """``[B, Hq, A] float32``."""
    sink_weights: torch.Tensor | None = None
    """``[B, Hq, A, S] float32``."""


__all__ = ["ColumnState", "RowState", "RowTargets", "finalize_state", "merge_states", "row_state"]
