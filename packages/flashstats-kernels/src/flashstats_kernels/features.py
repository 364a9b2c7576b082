"""Host-side features derived from the kernel statistics (Appendix B).

The kernels return per-row and per-column statistics; the features that published detectors read
are cheap functions of them plus key counts that follow from the mask alone:

- [`lookback_ratio`][flashstats_kernels.lookback_ratio] (Lookback Lens) from T1 ``prompt_mass``;
- [`bos_sink_rate`][flashstats_kernels.bos_sink_rate] from a T2 sink weight, or
  [`topk_sink_rate`][flashstats_kernels.topk_sink_rate] from the T3 column means.

Sign conventions: a higher lookback ratio means more attention per prompt key relative to response
keys; a higher sink rate means more attention parked on one key.
"""

from __future__ import annotations

import torch

from flashstats_kernels._problem import check_key_mask, normalize_prompt_len


def first_real_key(key_mask: torch.Tensor) -> torch.Tensor:
    """Position of the first real (non-padded) key of each sequence; 0 when none is real.

    Use it as per-batch sink positions for the BOS weight: ``first_real_key(mask)[:, None]``.

    Args:
        key_mask: [B, L] bool. True marks a real token.

    Returns:
        [B] int64.
    """
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool or key_mask.dim() != 2:
        raise TypeError(f"key_mask must be a [B, L] bool tensor, got {key_mask!r}")
    return key_mask.int().argmax(dim=1)  # the first maximum; 0 for a row without a real key


def _window_bounds(
    rows: int, keys: int, window: int | None, device: torch.device
) -> tuple[torch.Tensor, ...]:
    """Inclusive key range ``[lo, hi]`` that each response row may see before masking: ``[R]`` each."""
    hi = torch.arange(keys - rows, keys, device=device)
    lo = (hi - window + 1).clamp(min=0) if window is not None else torch.zeros_like(hi)
    return lo, hi


def visible_key_counts(
    rows: int,
    keys: int,
    *,
    key_mask: torch.Tensor | None = None,
    prompt_len: int | torch.Tensor | None = None,
    window: int | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """How many prompt keys and how many response keys each response row sees.

    Computed from prefix sums of ``key_mask`` in ``O(B * L)``, with the alignment of
    [`flashstats_kernels.response_attention`][] (row ``i`` at ``p_i = L - R + i``).

    Args:
        rows: R, the number of response rows.
        keys: L, the number of keys.
        key_mask: [B, L] bool or None.
        prompt_len: int, [B] integer tensor or None (``L - R``).
        window: sliding window or None.
        device: where the counts live when ``key_mask`` is None.

    Returns:
        tuple[torch.Tensor, torch.Tensor]: ``(n_prompt, n_response)``, each ``[B, R] int64`` (B = 1 when
        ``key_mask`` and ``prompt_len`` are not batched).
        The row's own position counts as a response key when it is at or after ``prompt_len``.
    """
    device = key_mask.device if key_mask is not None else torch.device(device)
    batch = (
        key_mask.shape[0]
        if key_mask is not None
        else (prompt_len.shape[0] if torch.is_tensor(prompt_len) else 1)
    )
    key_mask = check_key_mask(key_mask, batch, keys, device)
    plen = normalize_prompt_len(prompt_len, batch, rows, keys, device)  # [B]
    real = key_mask if key_mask is not None else torch.ones(batch, keys, dtype=torch.bool, device=device)
    prefix = torch.nn.functional.pad(real.long().cumsum(1), (1, 0))  # [B, L + 1]: real keys before j
    lo, hi = _window_bounds(rows, keys, window, device)

    def count(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # real keys in [a, b], [B, R]
        a, b = a.expand(batch, rows), b.expand(batch, rows)
        n = torch.gather(prefix, 1, (b + 1).clamp(0, keys)) - torch.gather(prefix, 1, a.clamp(0, keys))
        return torch.where(b >= a, n, 0)

    split = plen[:, None]  # keys < split are prompt
    n_prompt = count(lo[None, :], torch.minimum(hi[None, :], split - 1))
    n_response = count(torch.maximum(lo[None, :], split), hi[None, :])
    return n_prompt, n_response


def lookback_ratio(
    prompt_mass: torch.Tensor,
    *,
    key_mask: torch.Tensor | None = None,
    prompt_len: int | torch.Tensor | None = None,
    window: int | None = None,
    keys: int | None = None,
) -> torch.Tensor:
    """Lookback ratio of each response row, from the T1 prompt mass and the visible key counts.

    Lookback Lens compares the mean weight per prompt key with the mean weight per response key:
    with ``pm_i`` the prompt mass, ``n_P`` and ``n_R`` the visible prompt and response keys of row
    ``i`` ([`visible_key_counts`][flashstats_kernels.visible_key_counts]), ``A_P = pm_i / n_P`` and
    ``A_R = (1 - pm_i) / n_R``, and ``LR_i = A_P / (A_P + A_R)``. The row's weights sum to one, so the
    response mass is ``1 - pm_i``; its own position counts as a response key. Edge cases: ``n_P = 0`` gives 0,
    ``n_R = 0`` gives 1, and a row that sees no key gives 0. Higher means more attention per prompt key.

    Args:
        prompt_mass: [B, H, R] float. ``rows.prompt_mass`` of [`flashstats_kernels.response_attention`][].
        key_mask: [B, L] bool or None. the mask of the same call.
        prompt_len: int, [B] integer tensor or None. the prompt length of the same call.
        window: the window of the same call.
        keys: L; needed when ``key_mask`` is None.

    Returns:
        [B, H, R] float32 in ``[0, 1]``.
    """
    if prompt_mass.dim() != 3:
        raise ValueError(f"prompt_mass must have shape [B, H, R], got {tuple(prompt_mass.shape)}")
    if keys is None:
        if key_mask is None:
            raise ValueError("lookback_ratio needs keys=L when key_mask is None")
        keys = key_mask.shape[-1]
    rows = prompt_mass.shape[2]
    n_p, n_r = visible_key_counts(
        rows, keys, key_mask=key_mask, prompt_len=prompt_len, window=window, device=prompt_mass.device
    )
    n_p, n_r = n_p[:, None].float(), n_r[:, None].float()  # [B, 1, R]
    pm = prompt_mass.float()
    a_p = torch.where(n_p > 0, pm / n_p.clamp(min=1), 0.0)
    a_r = torch.where(n_r > 0, (1 - pm).clamp(min=0) / n_r.clamp(min=1), 0.0)
    total = a_p + a_r
    ratio = torch.where(total > 0, a_p / torch.where(total > 0, total, 1.0), 0.0)
    return torch.where((n_r == 0) & (n_p > 0), 1.0, ratio)


def topk_sink_rate(column_mean: torch.Tensor, k: int = 1) -> torch.Tensor:
    """Top-k sink rate of each head: the mean of its ``k`` largest column means ``c̄_j`` (T3).

    Args:
        column_mean: [B, H, L] float. ``columns.mean`` of [`flashstats_kernels.response_attention`][].
        k: how many keys, ``1 <= k <= L`` (1 by default, as in the paper).

    Returns:
        [B, H] float32. Higher means more attention concentrated on a few keys.
    """
    if column_mean.dim() != 3:
        raise ValueError(f"column_mean must have shape [B, H, L], got {tuple(column_mean.shape)}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= column_mean.shape[-1]:
        raise ValueError(f"k must be an int in [1, L={column_mean.shape[-1]}], got {k!r}")
    return column_mean.float().topk(k, dim=-1).values.mean(-1)


def bos_sink_rate(
    sink_weight: torch.Tensor,
    bos_position: torch.Tensor,
    *,
    key_mask: torch.Tensor | None = None,
    prompt_len: int | torch.Tensor | None = None,
    window: int | None = None,
    keys: int | None = None,
) -> torch.Tensor:
    """BOS sink rate ``c̄_s`` of each head from the T2 weight on the BOS key ``s``, without T3.

    The mean of ``p_{i s}`` over the rows that T3 counts (``p_i >= prompt_len``, a real token at
    ``p_i``) and that see ``s``. It equals ``columns.mean[b, h, s]``, so T3 is not needed when T2 read
    the BOS weight (pass ``sink_positions = first_real_key(key_mask)[:, None]``).

    Args:
        sink_weight: [B, H, R] float. ``lookups.sink_weights[..., i]`` for the BOS sink.
        bos_position: [B] integer tensor. the BOS position of each sequence.
        key_mask: [B, L] bool or None. the mask of the same call.
        prompt_len: int, [B] integer tensor or None. the prompt length of the same call.
        window: the window of the same call.
        keys: L; needed when ``key_mask`` is None.

    Returns:
        [B, H] float32 (0 where no counted row sees the BOS key). Higher means a stronger sink.
    """
    if sink_weight.dim() != 3:
        raise ValueError(f"sink_weight must have shape [B, H, R], got {tuple(sink_weight.shape)}")
    if keys is None:
        if key_mask is None:
            raise ValueError("bos_sink_rate needs keys=L when key_mask is None")
        keys = key_mask.shape[-1]
    b, _, rows = sink_weight.shape
    device = sink_weight.device
    plen = normalize_prompt_len(prompt_len, b, rows, keys, device)
    pos = torch.arange(keys - rows, keys, device=device)[None, :]  # [1, R]
    s = bos_position.to(device=device, dtype=torch.int64)[:, None]  # [B, 1]
    sees = (s <= pos) & (pos >= plen[:, None])
    if window is not None:
        sees = sees & (s > pos - window)
    if key_mask is not None:
        real = key_mask[:, keys - rows :] & torch.gather(key_mask, 1, s.clamp(0, keys - 1))
        sees = sees & real
    count = sees.sum(-1, keepdim=True).float()  # [B, 1]
    total = (sink_weight.float() * sees[:, None, :]).sum(-1)
    return torch.where(count > 0, total / count.clamp(min=1), 0.0)
