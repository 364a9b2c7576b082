"""JSONL reading and atomic writing of datasets.

One JSON object per line with the fields of ``Example``; ``spans`` as a list of
``{"start", "end", "label"}`` objects. Reading reports every bad line with file, line and field.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from .dataset import Dataset, Drop, LoadReport
from .files import atomic_write_text
from .schema import SPLITS, Example, Span

BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte order mark, skipped at the start of a JSONL file."""
REQUIRED = ("id", "source", "context", "question", "answer", "label", "group")


class RecordError(ValueError):
    """A record that cannot become an ``Example``; ``field`` names the offending field."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"field {field!r}: {reason}")
        self.field = field
        self.reason = reason


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode: no lone surrogate (what a JSON escape of U+D800..U+DFFF gives)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def example_to_dict(ex: Example) -> dict[str, Any]:
    """The JSON-ready form of one example (field names as in ``Example``)."""
    return {
        "id": ex.id,
        "source": ex.source,
        "context": ex.context,
        "question": ex.question,
        "answer": ex.answer,
        "label": ex.label,
        "group": ex.group,
        "split": ex.split,
        "spans": [{"start": s.start, "end": s.end, "label": s.label} for s in ex.spans],
        "meta": dict(ex.meta),
    }


def _spans(raw: Any) -> tuple[Span, ...]:
    if not isinstance(raw, list):
        raise RecordError("spans", f"expected a list, got {type(raw).__name__}")
    out = []
    for i, s in enumerate(raw):
        if not isinstance(s, Mapping) or "start" not in s or "end" not in s:
            raise RecordError("spans", f"item {i} needs 'start' and 'end'")
        try:
            out.append(Span(s["start"], s["end"], str(s.get("label", "hallucination"))))
        except (TypeError, ValueError) as err:
            raise RecordError("spans", f"item {i}: {err}") from None
    return tuple(out)


def example_from_dict(rec: Any) -> Example:
    """Build an ``Example`` from its JSON form.

    Raises:
        RecordError: naming the missing or invalid field (missing field, label not 0/1, empty
            answer, unknown split, a span outside the answer, wrong type).
    """
    if not isinstance(rec, Mapping):
        raise RecordError("<json>", f"expected a JSON object, got {type(rec).__name__}")
    for name in REQUIRED:
        if name not in rec:
            raise RecordError(name, "missing")
    for name in ("id", "source", "context", "question", "answer", "group"):
        if not isinstance(rec[name], str):
            raise RecordError(name, f"expected a string, got {type(rec[name]).__name__}")
        if not is_unicode(rec[name]):
            raise RecordError(name, "holds a lone surrogate (a \\ud800-\\udfff escape): not valid Unicode")
    if not rec["answer"].strip():
        raise RecordError("answer", "empty answer")
    label = rec["label"]
    if isinstance(label, bool) or label not in (0, 1):
        raise RecordError("label", f"unknown label {label!r}; expected 0 (supported) or 1 (hallucinated)")
    split = rec.get("split")
    if split is not None and split not in SPLITS:
        raise RecordError("split", f"unknown split {split!r}; expected one of {SPLITS} or null")
    meta = rec.get("meta") or {}
    if not isinstance(meta, Mapping):
        raise RecordError("meta", f"expected an object, got {type(meta).__name__}")
    spans = _spans(rec.get("spans") or [])
    if any(s.end > len(rec["answer"]) for s in spans):
        raise RecordError("spans", f"a span lies outside the answer of {len(rec['answer'])} characters")
    return Example(
        id=rec["id"],
        source=rec["source"],
        context=rec["context"],
        question=rec["question"],
        answer=rec["answer"],
        label=int(label),
        group=rec["group"],
        split=split,
        spans=spans,
        meta={str(k): str(v) for k, v in meta.items()},
    )


def read_jsonl(path: str | os.PathLike[str], *, errors: Literal["raise", "drop"] = "raise") -> Dataset:
    """Read a dataset written by ``write_jsonl``.

    Args:
        path: the JSONL file.
        errors: ``"raise"`` stops at the first bad line; ``"drop"`` skips bad lines and records each
            of them in ``Dataset.report.drops`` (file, line, field, reason). Blank lines are ignored.

    Returns:
        The dataset, with ``report`` set.

    Raises:
        ValueError: ``"path:line: field 'name': reason"`` for a bad line when ``errors="raise"``,
            or for a duplicate id.
        FileNotFoundError: when ``path`` does not exist.
    """
    if errors not in ("raise", "drop"):
        raise ValueError(f"errors must be 'raise' or 'drop', got {errors!r}")
    path = Path(path)
    examples: list[Example] = []
    drops: list[Drop] = []
    seen: set[str] = set()
    n_read = 0
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder; expected a JSONL file")
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1:
                raw = raw.removeprefix(BOM)  # a UTF-8 byte order mark (Windows editors write one)
            if not raw.strip():
                continue
            n_read += 1
            try:
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise RecordError("<text>", f"not UTF-8 (byte {err.start + 1} of the line)") from None
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as err:
                    raise RecordError("<json>", f"malformed JSON ({err.msg} at column {err.colno})") from None
                ex = example_from_dict(rec)
                if ex.id in seen:
                    raise RecordError("id", f"duplicate id {ex.id!r}")
            except RecordError as err:
                drop = Drop(str(path), lineno, err.field, err.reason)
                if errors == "raise":
                    raise ValueError(str(drop)) from None
                drops.append(drop)
                continue
            seen.add(ex.id)
            examples.append(ex)
    report = LoadReport(str(path), n_read, len(examples), tuple(drops))
    return Dataset(tuple(examples), path.stem, report)


def write_jsonl(
    examples: Dataset | Iterable[Example], path: str | os.PathLike[str], *, overwrite: bool = False
) -> Path:
    """Write examples as JSONL, atomically; refuses to replace an existing file unless ``overwrite``.

    Raises:
        FileExistsError: when ``path`` exists and ``overwrite`` is false.
    """
    lines = [json.dumps(example_to_dict(ex), ensure_ascii=False) + "\n" for ex in examples]
    return atomic_write_text(path, "".join(lines), overwrite=overwrite)
