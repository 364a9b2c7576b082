"""The typed example record shared by every builder, detector and judge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Split = Literal["train", "validation", "test"]
SPLITS: tuple[Split, ...] = ("train", "validation", "test")


@dataclass(frozen=True)
class Span:
    """A labelled hallucinated span of an answer, in character offsets of ``Example.answer``.

    ``end`` is exclusive, so ``answer[start:end]`` is the span's text.
    """

    start: int
    end: int
    label: str = "hallucination"

    def __post_init__(self) -> None:
        if not isinstance(self.start, int) or not isinstance(self.end, int):
            raise TypeError(f"Span offsets must be int, got start={self.start!r} end={self.end!r}")
        if not 0 <= self.start < self.end:
            raise ValueError(f"Span needs 0 <= start < end, got start={self.start} end={self.end}")


@dataclass(frozen=True)
class Example:
    """One (context, question, answer) triple with its label.

    ``label`` is 1 when the context does not support the answer (hallucinated) and 0 when it does.
    ``group`` ties related examples (same source document, near-duplicate contexts) so that they are
    always put in the same split. ``spans`` are character offsets into ``answer``. ``meta`` holds
    string-valued provenance (e.g. generator model, task, the kind of a synthetic hallucination).

    Raises:
        ValueError: when ``label`` is not 0 or 1, ``split`` is not a known split, or a span lies
            outside the answer.
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

    def __post_init__(self) -> None:
        for name in ("id", "source", "context", "question", "answer", "group"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"Example.{name} must be str, got {type(getattr(self, name)).__name__}")
        if isinstance(self.label, bool) or self.label not in (0, 1):
            raise ValueError(f"Example.label must be 0 (supported) or 1 (hallucinated), got {self.label!r}")
        if self.split is not None and self.split not in SPLITS:
            raise ValueError(f"Example.split must be one of {SPLITS} or None, got {self.split!r}")
        for span in self.spans:
            if not isinstance(span, Span):
                raise TypeError(f"Example.spans must hold Span, got {type(span).__name__}")
            if span.end > len(self.answer):
                raise ValueError(
                    f"span [{span.start}, {span.end}) lies outside the {len(self.answer)}-character answer"
                )
