"""Serving a detector over HTTP: ``halluprobe serve``.

- `halluprobe.serving.service`: the library the routes call
  ([`ScoringService`][halluprobe.serving.ScoringService]).
- `halluprobe.serving.batching`: the bounded queue that shares forwards
  ([`BatchQueue`][halluprobe.serving.BatchQueue]).
- `halluprobe.serving.schemas`: the request and response models (the OpenAPI schema).
- `halluprobe.serving.app`: the FastAPI app ([`create_app`][halluprobe.serving.create_app]); needs the
  ``halluprobe[serve]`` extra. What a request must be before a route sees it is checked in
  `halluprobe.serving._guard`, the stream protocol runs in `halluprobe.serving._stream`.
- `halluprobe.serving.server`: the listening socket, bound before the proxy loads, and uvicorn with the
  server's timeouts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from halluprobe.serving.app import create_app
    from halluprobe.serving.batching import BatchQueue, QueueClosed, QueueFull
    from halluprobe.serving.config import ServeConfig
    from halluprobe.serving.service import ScoringService

_EXPORTS = {
    "ServeConfig": "config",
    "create_app": "app",
    "BatchQueue": "batching",
    "QueueClosed": "batching",
    "QueueFull": "batching",
    "ScoringService": "service",
}

__all__ = ["BatchQueue", "QueueClosed", "QueueFull", "ScoringService", "ServeConfig", "create_app"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"halluprobe.serving.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'halluprobe.serving' has no attribute {name!r}")
