"""The limits and options of ``halluprobe serve`` (no web framework imported: the CLI parser reads them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ServeConfig:
    """Limits and options of the server (the ``halluprobe serve`` flags)."""

    token: str | None = None
    """Bearer token that ``/v1/*`` requires (None: open)."""
    max_wait_ms: float = 10.0
    """How long the batcher waits for more answers after the first (milliseconds)."""
    max_batch: int = 32
    """Most answers per proxy forward."""
    max_queue: int = 256
    """Most answers waiting or in a forward; beyond it requests get 503 with Retry-After."""
    max_items: int = 64
    """Most answers per request."""
    max_body_bytes: int = 1 << 20
    """Largest request body (and stream message)."""
    max_streams: int = 4
    """Most open ``/v1/stream`` connections."""
