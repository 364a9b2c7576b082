"""The fine-tuned reader's inputs: formatted token ids, answer-token labels from spans, batches.

Every row is formatted as the probes format it ([`flashstats_hf.format_example`][], the proxy's chat
template; an example longer than the proxy's positions is refused, never truncated). An answer token
is labelled 1 (unsupported) when its characters overlap an annotated hallucinated span, 0 otherwise;
every token of a supported answer is 0; a hallucinated answer without spans has no token labels
(its loss is example-level, through the pooled token score).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from halubench_data import Example, Span

__all__ = ["ReaderRow", "as_examples", "batches", "encode_row", "span_token_labels"]


@dataclass(frozen=True)
class ReaderRow:
    """One formatted example for the reader."""

    id: str
    """Example id (named in errors)."""
    source: str
    """Its source (sources are weighted equally in the loss)."""
    ids: np.ndarray
    """``[L] int64``: token ids of the formatted example (prompt, then answer)."""
    start: int
    """Index of the first answer token in ``ids``."""
    label: int
    """1 = hallucinated, 0 = supported (-1: unlabelled, for scoring only)."""
    token_labels: np.ndarray | None
    """``[A] float32`` per answer token (1 = unsupported), or None (a hallucinated answer without spans)."""

    @property
    def answer_len(self) -> int:
        """Number of answer tokens ``A``."""
        return len(self.ids) - self.start


def span_token_labels(offsets: np.ndarray, spans: Sequence[Span]) -> np.ndarray:
    """``[A] float32``: 1 where a token's characters overlap one of ``spans``, else 0.

    Args:
        offsets: ``[A, 2]`` character range ``[start, end)`` of each answer token in the answer
            (`halluprobe.features._token_data.token_offsets`).
        spans: Hallucinated character spans of the answer (``end`` exclusive).
    """
    out = np.zeros(len(offsets), dtype=np.float32)
    for sp in spans:
        hit = (offsets[:, 0] < sp.end) & (offsets[:, 1] > sp.start)
        out[hit] = 1.0
    return out


def encode_row(tokenizer, example, *, max_positions: int | None, labelled: bool = True) -> ReaderRow:
    """The `ReaderRow` of one example.

    ``example`` has ``id``, ``source``, ``context``, ``question``, ``answer``, ``label`` and ``spans``
    (``source``, ``label`` and ``spans`` are optional when not ``labelled``).

    Raises:
        ValueError: naming the example, when its answer is empty, it has more tokens than
            ``max_positions``, or a hallucinated span lies outside its answer tokens.
    """
    from flashstats_hf import format_example

    from halluprobe.features._token_data import token_offsets

    name = f"example {getattr(example, 'id', '?')!r}"
    try:
        ids, start = format_example(tokenizer, example.context, example.question, example.answer)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    if max_positions is not None and len(ids) > max_positions:
        raise ValueError(
            f"{name} has {len(ids)} tokens but the proxy reads at most {max_positions} positions; "
            "halluprobe refuses rather than truncating: shorten its context or drop it"
        )
    label = int(getattr(example, "label", -1)) if labelled else -1
    spans = tuple(getattr(example, "spans", ()) or ())
    n_answer = len(ids) - start
    token_labels: np.ndarray | None
    if label == 0:
        token_labels = np.zeros(n_answer, dtype=np.float32)
    elif label == 1 and spans:
        offsets = token_offsets(tokenizer, example.answer, ids[start:])
        token_labels = span_token_labels(offsets, spans)
        if not token_labels.any():
            raise ValueError(f"{name}: its hallucinated spans cover no answer token")
    else:
        token_labels = None
    return ReaderRow(
        id=str(getattr(example, "id", "")),
        source=str(getattr(example, "source", "") or "unknown"),
        ids=np.asarray(ids, dtype=np.int64),
        start=int(start),
        label=label,
        token_labels=token_labels,
    )


def batches(
    lengths: Sequence[int],
    max_tokens: int,
    rng: np.random.Generator | None = None,
    max_rows: int | None = None,
) -> list[list[int]]:
    """Row indices grouped by length into batches of at most ``max_tokens`` padded tokens.

    A batch also holds at most ``max_rows`` rows when given. Rows are sorted by length so a batch
    pads little; a row longer than ``max_tokens`` is a batch of its own. With ``rng`` the rows of equal
    length and the batch order are shuffled (training); without it the order is fixed (scoring).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    n = len(lengths)
    tie = rng.permutation(n) if rng is not None else np.arange(n)
    order = sorted(range(n), key=lambda i: (lengths[i], tie[i]))
    out: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        full = max_rows is not None and len(cur) >= max_rows
        if cur and (full or (len(cur) + 1) * max(lengths[i], lengths[cur[-1]]) > max_tokens):
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    if rng is not None:
        out = [out[k] for k in rng.permutation(len(out))]
    return out


def as_examples(X: Any, y: Any, sources: Any) -> list[Example]:
    """The rows of ``X`` as `halubench_data.Example` (labels from ``y`` or the rows; sources likewise).

    Raises:
        ValueError: naming the row, when it is not an example, mapping or triple, has an empty answer,
            or its label is not 0 or 1; or when ``y`` / ``sources`` differ in length from ``X``.
    """
    if isinstance(X, str | bytes) or not hasattr(X, "__iter__"):
        raise ValueError(f"X must be a sequence of examples, got {type(X).__name__}")
    rows = list(X)
    if not rows:
        raise ValueError("X is empty: expected at least one example")
    for name, given in (("y", y), ("sources", sources)):
        if given is not None and len(given) != len(rows):
            raise ValueError(f"{name} has {len(given)} entries for {len(rows)} rows of X")
    out = []
    for i, row in enumerate(rows):
        if isinstance(row, Mapping):
            get = row.get
        elif all(hasattr(row, k) for k in ("context", "answer")):

            def get(k, default=None, row=row):
                return getattr(row, k, default)
        elif isinstance(row, tuple | list) and len(row) == 3:

            def get(k, default=None, row=row):
                return dict(zip(("context", "question", "answer"), row, strict=True)).get(k, default)
        else:
            raise ValueError(
                f"row {i}: expected an Example, a mapping or a (context, question, answer) triple"
            )
        rid = str(get("id", None) or f"row{i}")
        label = y[i] if y is not None else get("label", None)
        if isinstance(label, bool) or label not in (0, 1):
            raise ValueError(
                f"row {i} ({rid!r}): label must be 0 (supported) or 1 (hallucinated), got {label!r}"
            )
        texts = [get(k, "") for k in ("context", "question", "answer")]
        if not all(isinstance(t, str) for t in texts) or not texts[2].strip():
            raise ValueError(
                f"row {i} ({rid!r}): context, question and answer must be strings, the answer non-empty"
            )
        spans = tuple(
            s if isinstance(s, Span) else Span(int(s[0]), int(s[1])) for s in (get("spans", ()) or ())
        )
        if any(s.end > len(texts[2]) for s in spans):
            raise ValueError(f"row {i} ({rid!r}): a span lies outside the {len(texts[2])}-character answer")
        src = sources[i] if sources is not None else get("source", None)
        context, question, answer = texts
        try:
            out.append(Example(rid, str(src or "unknown"), context, question, answer, int(label),
                               str(get("group", None) or rid), get("split", None), spans))  # fmt: skip
        except (TypeError, ValueError) as exc:
            raise ValueError(f"row {i} ({rid!r}): {exc}") from None
    return out
