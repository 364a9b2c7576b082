"""Limits and options of ``halluprobe serve`` (no web framework imported: the CLI parser reads them)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

MAX_WAIT_MS_LIMIT = 10_000.0
"""Longest batching wait accepted (ms): a wait beyond seconds only delays every answer."""


@dataclass
class ServeConfig:
    """Limits and options of the server (the ``halluprobe serve`` flags)."""

    token: str | None = None
    """Bearer token that ``/v1/*`` requires (None: open)."""
    max_wait_ms: float = 10.0
    """How long the batcher waits for more answers after the first (ms, 0 to `MAX_WAIT_MS_LIMIT`)."""
    max_batch: int = 32
    """Most answers per proxy forward."""
    max_queue: int = 256
    """Most answers waiting or in a forward; beyond it requests get 503 with Retry-After. A request of
    more answers than this can never be queued: it gets 413."""
    max_items: int = 64
    """Most answers per request."""
    max_body_bytes: int = 1 << 20
    """Largest request body, and most bytes a stream's messages may hold in all."""
    max_streams: int = 4
    """Most open ``/v1/stream`` connections; one more is closed with code 1013 (try again later)."""
    header_timeout_s: float = 10.0
    """Seconds a client has to send a request's line and headers (then 408 and the connection closes)."""
    body_timeout_s: float = 30.0
    """Seconds a client has to send a request's whole body once its headers arrived (then 408)."""
    keep_alive_s: int = 5
    """Seconds an idle keep-alive connection is kept open."""
    stream_idle_s: float = 60.0
    """Seconds a stream may go without a message from its client before it is closed (code 1008)."""
    shutdown_timeout_s: int = 60
    """On SIGTERM, seconds the requests in flight get to finish before their connections are closed."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "token" or value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"ServeConfig.{f.name} must be a finite number, got {value!r}")
            if value < 0 or (value == 0 and f.name not in ("max_wait_ms",)):
                raise ValueError(f"ServeConfig.{f.name} must be > 0, got {value!r}")
        if self.max_wait_ms > MAX_WAIT_MS_LIMIT:
            raise ValueError(f"max_wait_ms must be at most {MAX_WAIT_MS_LIMIT:g}, got {self.max_wait_ms!r}")
