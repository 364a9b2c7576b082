"""`Report`: what a run tells its caller (the fit stages of `halluprobe.pipeline` return one)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Report"]


@dataclass(frozen=True)
class Report:
    """What a run tells its caller: text for people and a JSON document (either may be a function)."""

    text: str | Callable[[], str]
    doc: dict[str, Any] | Callable[[], dict[str, Any]]
