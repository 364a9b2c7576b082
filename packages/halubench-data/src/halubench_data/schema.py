"""The typed example record shared by every builder, detector and judge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Split = Literal["train", "validation", "test"]


@dataclass(frozen=True)
class Span:
    """A labelled hallucinated span of an answer, in character offsets of ``Example.answer``."""

    start: int
    end: int
    label: str = "hallucination"


@dataclass(frozen=True)
class Example:
    """One (context, question, answer) triple with its label.

    ``label`` is 1 when the context does not support the answer (hallucinated) and 0 when it does.
    """

    id: str
    source: str
    context: str
    question: str
    answer: str
    label: int
    group: str
    split: Split | None = None
    spans: tuple[Span, ...] = field(default_factory=tuple)
    meta: dict[str, str] = field(default_factory=dict)
