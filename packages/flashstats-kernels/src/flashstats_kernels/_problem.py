"""Input validation and normalisation shared by every backend.

`check_problem` turns the user's arguments into a `Problem`: validated shapes, a resolved
``scale``, and ``prompt_len`` as a ``[B]`` int64 tensor on the inputs' device. Nothing here reads a
CUDA tensor back to the host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

MAX_HEAD_DIM = 256
"""Widest head dim the kernels take (every backend; the Triton kernels pad D to a power of two)."""
TORCH_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float8_e5m2)


@dataclass(frozen=True)
class Problem:
    """Validated sizes and normalised options of one response-attention call."""

    batch: int
    q_heads: int
    kv_heads: int
    rows: int
    keys: int
    head_dim: int
    scale: float
    softcap: float | None
    window: int | None
    key_mask: torch.Tensor | None
    """``[B, L] bool`` or None (every key real)."""
    prompt_len: torch.Tensor
    """``[B] int64`` on the inputs' device."""

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.q_heads // self.kv_heads


@dataclass(frozen=True)
class Varlen:
    """Where each sequence of a packed (varlen) call lives on the token axes of q and k.

    Sequence ``b`` owns query rows ``[q0, q0 + R_b)`` and keys ``[k0, k0 + L_b)``; its rows are the last
    ``R_b`` of its ``L_b`` positions, as in a dense call.
    """

    table: torch.Tensor
    """``[N, 4] int64`` rows ``(q0, R_b, k0, L_b)``, contiguous, on the inputs' device."""
    max_rows: int
    """An upper bound of ``R_b`` (``max_seqlen_q``)."""
    max_keys: int
    """An upper bound of ``L_b`` (``max_seqlen_k``)."""
    full_rows: bool
    """Whether the sequences cover every query row (no ``seqused_q``)."""
    full_keys: bool
    """Whether the sequences cover every key (no ``seqused_k``)."""

    @property
    def batch(self) -> int:
        """Number of sequences ``N``."""
        return self.table.shape[0]


def _check_tensor(name: str, x: object, ndim: int, layout: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {layout}, got {type(x).__name__}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must have shape {layout} ({ndim} dims), got {tuple(x.shape)}")
    return x


def check_qk(q: object, k: object, v: object | None) -> tuple[int, int, int, int, int, int]:
    """Checks the shapes, dtypes and devices of ``q``, ``k`` (and ``v`` when given).

    Returns:
        ``(B, Hq, Hkv, R, L, D)``.
    """
    q = _check_tensor("q", q, 4, "[B, Hq, R, D]")
    k = _check_tensor("k", k, 4, "[B, Hkv, L, D]")
    b, hq, r, d = q.shape
    if b < 1 or hq < 1 or d < 1:
        raise ValueError(f"q must have B >= 1, Hq >= 1 and D >= 1, got shape {tuple(q.shape)}")
    if k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"k must have shape [B={b}, Hkv, L, D={d}] to match q, got {tuple(k.shape)}")
    hkv, seq = k.shape[1], k.shape[2]
    if hkv < 1 or hq % hkv != 0:
        raise ValueError(f"Hq ({hq}) must be a positive multiple of Hkv ({hkv}) (grouped-query attention)")
    if d > MAX_HEAD_DIM:
        raise ValueError(f"head dim D must be <= {MAX_HEAD_DIM}, got {d}")
    if not 1 <= r <= seq:
        raise ValueError(
            f"need 1 <= R <= L (response rows are the last R of L positions), got R={r}, L={seq}"
        )
    tensors = [("k", k)]
    if v is not None:
        v = _check_tensor("v", v, 4, "[B, Hkv, L, D]")
        if v.shape != k.shape:
            raise ValueError(f"v must have the shape of k {tuple(k.shape)}, got {tuple(v.shape)}")
        tensors.append(("v", v))
    for name, x in tensors:
        if x.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {x.dtype}")
        if x.device != q.device:
            raise ValueError(f"{name} must be on q's device {q.device}, got {x.device}")
    return b, hq, hkv, r, seq, d


def check_key_mask(key_mask: object, b: int, seq: int, device: torch.device) -> torch.Tensor | None:
    """Checks ``key_mask``: None or a ``[B, L] bool`` tensor on ``device``."""
    if key_mask is None:
        return None
    if not isinstance(key_mask, torch.Tensor):
        raise TypeError(f"key_mask must be None or a [B, L] bool tensor, got {type(key_mask).__name__}")
    if key_mask.dtype != torch.bool:
        raise TypeError(f"key_mask must be a bool tensor (True = real token), got {key_mask.dtype}")
    if tuple(key_mask.shape) != (b, seq):
        raise ValueError(f"key_mask must have shape [B, L] = [{b}, {seq}], got {tuple(key_mask.shape)}")
    if key_mask.device != device:
        raise ValueError(f"key_mask must be on q's device {device}, got {key_mask.device}")
    return key_mask


def normalize_prompt_len(prompt_len: object, b: int, r: int, seq: int, device: torch.device) -> torch.Tensor:
    """Turns ``prompt_len`` (None, int, or ``[B]`` integer tensor) into a ``[B] int64`` tensor on ``device``.

    Values must lie in ``[0, L]``. A CPU tensor is checked; a CUDA tensor (or any tensor while
    ``torch.compile`` traces, where a check would read values and break the graph) is clamped into
    range on the device instead, so that no host synchronisation happens.
    """
    if prompt_len is None:
        prompt_len = seq - r
    if isinstance(prompt_len, bool):
        raise TypeError("prompt_len must be None, an int or a [B] integer tensor, got bool")
    if isinstance(prompt_len, int):
        if not 0 <= prompt_len <= seq:
            raise ValueError(f"prompt_len must lie in [0, L={seq}], got {prompt_len}")
        return torch.full((b,), prompt_len, dtype=torch.int64, device=device)
    if not isinstance(prompt_len, torch.Tensor):
        raise TypeError(
            f"prompt_len must be None, an int or a [B] integer tensor, got {type(prompt_len).__name__}"
        )
    if prompt_len.dtype.is_floating_point or prompt_len.dtype.is_complex or prompt_len.dtype == torch.bool:
        raise TypeError(f"prompt_len tensor must have an integer dtype, got {prompt_len.dtype}")
    if tuple(prompt_len.shape) != (b,):
        raise ValueError(f"prompt_len tensor must have shape [B] = [{b}], got {tuple(prompt_len.shape)}")
    if prompt_len.device.type == "cpu" and not torch.compiler.is_compiling():
        if bool((prompt_len < 0).any()) or bool((prompt_len > seq).any()):
            raise ValueError(f"prompt_len values must lie in [0, L={seq}], got {prompt_len.tolist()}")
    else:
        prompt_len = prompt_len.clamp(0, seq)
    return prompt_len.to(device=device, dtype=torch.int64, non_blocking=True)


def _capturing(device: torch.device) -> bool:
    """Whether a CUDA graph is being captured on ``device``'s current stream (never while compiling)."""
    if torch.compiler.is_compiling() or torch.device(device).type != "cuda":
        return False
    return torch.cuda.is_current_stream_capturing()


def device_ints(values: Sequence[int], device: torch.device) -> torch.Tensor:
    """``[N] int64`` tensor of ``values`` on ``device``.

    While a CUDA graph is being captured the values are written on the device by fill kernels (a
    host-to-device copy cannot be captured); otherwise they are copied over.
    """
    if _capturing(device):
        cols = [torch.full((1,), v, dtype=torch.int64, device=device) for v in values]
        return torch.cat(cols) if cols else torch.empty(0, dtype=torch.int64, device=device)
    return torch.tensor(list(values), dtype=torch.int64).to(device, non_blocking=True)


def normalize_sink_positions(sink_positions: object, b: int, device: torch.device) -> torch.Tensor:
    """Turns ``sink_positions`` (tuple of ints or ``[B, S]`` integer tensor) into ``[B, S] int64``.

    Positions outside ``[0, L)`` are allowed: their weights are 0. While a CUDA graph is being captured,
    a tuple is written on the device by fill kernels (a host-to-device copy cannot be captured).
    """
    if isinstance(sink_positions, (tuple, list)):
        if not all(isinstance(p, int) and not isinstance(p, bool) for p in sink_positions):
            raise TypeError(f"sink_positions tuple must hold ints, got {sink_positions!r}")
        return device_ints(sink_positions, device).unsqueeze(0).expand(b, len(sink_positions))
    if not isinstance(sink_positions, torch.Tensor):
        got = type(sink_positions).__name__
        raise TypeError(f"sink_positions must be a tuple of ints or a [B, S] int64 tensor, got {got}")
    if (
        sink_positions.dtype.is_floating_point
        or sink_positions.dtype.is_complex
        or sink_positions.dtype == torch.bool
    ):
        raise TypeError(f"sink_positions tensor must have an integer dtype, got {sink_positions.dtype}")
    if sink_positions.dim() != 2 or sink_positions.shape[0] != b:
        raise ValueError(
            f"sink_positions tensor must have shape [B={b}, S], got {tuple(sink_positions.shape)}"
        )
    return sink_positions.to(device=device, dtype=torch.int64, non_blocking=True)


def check_options(
    scale: object, softcap: object, window: object, d: int
) -> tuple[float, float | None, int | None]:
    """Checks ``scale`` (default ``1/sqrt(D)``), ``softcap`` (> 0) and ``window`` (int >= 1)."""
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise TypeError(f"scale must be None or a finite float, got {scale!r}")
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, (int, float)):
            raise TypeError(f"softcap must be None or a positive float, got {softcap!r}")
        if not (math.isfinite(softcap) and softcap > 0):
            raise ValueError(f"softcap must be a positive finite float, got {softcap!r}")
        softcap = float(softcap)
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int):
            raise TypeError(f"window must be None or an int >= 1, got {window!r}")
        if window < 1:
            raise ValueError(
                f"window must be >= 1 (key j visible from p iff p - window < j <= p), got {window}"
            )
    return float(scale), softcap, window


def check_problem(
    q: object,
    k: object,
    v: object | None,
    *,
    key_mask: object,
    prompt_len: object,
    scale: object,
    softcap: object,
    window: object,
) -> Problem:
    """Validates every argument of a call and normalises the options (see `Problem`)."""
    b, hq, hkv, r, seq, d = check_qk(q, k, v)
    assert isinstance(q, torch.Tensor)  # check_qk raised otherwise
    device = q.device
    scale_f, softcap_f, window_i = check_options(scale, softcap, window, d)
    return Problem(
        batch=b,
        q_heads=hq,
        kv_heads=hkv,
        rows=r,
        keys=seq,
        head_dim=d,
        scale=scale_f,
        softcap=softcap_f,
        window=window_i,
        key_mask=check_key_mask(key_mask, b, seq, device),
        prompt_len=normalize_prompt_len(prompt_len, b, r, seq, device),
    )


def check_lse(lse: object, b: int, hq: int, r: int, device: torch.device) -> torch.Tensor:
    """Checks a stored LSE: ``[B, Hq, R] float32`` on ``device``."""
    lse = _check_tensor("lse", lse, 3, "[B, Hq, R]")
    if tuple(lse.shape) != (b, hq, r):
        raise ValueError(f"lse must have shape [B, Hq, R] = [{b}, {hq}, {r}], got {tuple(lse.shape)}")
    if lse.dtype != torch.float32 and lse.dtype != torch.float64:
        raise TypeError(f"lse must be float32 (natural-log log-sum-exp), got {lse.dtype}")
    if lse.device != device:
        raise ValueError(f"lse must be on q's device {device}, got {lse.device}")
    return lse


def fold_scale_sign(q: torch.Tensor, scale: float) -> tuple[torch.Tensor, float]:
    """``(q', scale')`` with ``scale' > 0`` and ``scale' * <q', k> == scale * <q, k>`` for every key.

    The Triton kernels fold the scale into the row maximum (``max_j s_j * c``), which holds only for
    ``c > 0``; masked scores are ``-inf`` and ``-inf * c`` is NaN or ``+inf`` otherwise. A negative
    scale moves its sign into ``q`` (exact in every dtype); a zero scale becomes ``q * 0`` with scale 1
    (a NaN or infinite query still gives NaN scores, as ``0 * <q, k>`` does). Positive scales pass
    through without a copy.
    """
    if scale > 0:
        return q, scale
    sign = -1.0 if scale < 0 else 0.0
    return (q.float() * sign).to(q.dtype), (-scale if scale < 0 else 1.0)
