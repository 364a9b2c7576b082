"""Row-per-example files (JSONL, JSON list or CSV) with named columns: HaluBench, TRIVIA+, PHANTOM.

``FieldMap`` names the columns. Each field lists accepted names, tried in order, so that small
spelling differences between releases resolve without code changes; pass your own ``FieldMap`` when a
release names them otherwise. Label values map through ``LABEL_VALUES`` (``PASS``/``FAIL``,
``0``/``1``, ``true``/``false``, ``faithful``/``hallucinated``, ...).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..io import RecordError
from ..schema import Example
from ._common import Collector, nonempty, read_json_lines

LABEL_VALUES: dict[str, int] = {
    "1": 1, "true": 1, "yes": 1, "fail": 1, "hallucinated": 1, "hallucination": 1, "unfaithful": 1,
    "0": 0, "false": 0, "no": 0, "pass": 0, "faithful": 0, "supported": 0, "correct": 0,
    "not hallucination": 0, "not hallucinated": 0, "not_hallucination": 0,
}  # fmt: skip


@dataclass(frozen=True)
class FieldMap:
    """Accepted column names per ``Example`` field, first match wins."""

    context: tuple[str, ...] = ("context", "passage", "document", "doc", "chunk", "source")
    """Grounding text."""
    question: tuple[str, ...] = ("question", "query", "prompt")
    """Question (an empty string when no column matches and ``question_optional``)."""
    answer: tuple[str, ...] = ("answer", "response", "output")
    """Answer to judge."""
    label: tuple[str, ...] = ("label", "is_hallucinated", "is_hallucination", "hallucination", "hallucinated")
    """Label column; 1/true/FAIL/hallucinated mean hallucinated."""
    group: tuple[str, ...] = ("group", "doc_id", "document_id", "source_id", "context_id", "filename", "file")
    """Group column; when none matches, identical contexts form a group."""
    id: tuple[str, ...] = ("id", "example_id", "sample_id")
    """Id column; the line number when none matches."""
    source: tuple[str, ...] = ("source_ds", "source", "dataset", "subset")
    """Sub-source column (e.g. HaluBench's ``source_ds``); only read when ``split_sources``."""
    question_optional: bool = False
    """Allow rows without a question."""


def parse_label(value: Any, *, invert: bool = False) -> int:
    """Map a label value to 1 = hallucinated, 0 = supported (``invert`` for 1 = supported files).

    Raises:
        RecordError: on a value not in ``LABEL_VALUES`` (field ``label``).
    """
    key = str(value).strip().lower() if not isinstance(value, bool) else str(value).lower()
    if isinstance(value, float) and value in (0.0, 1.0):
        key = str(int(value))
    if key not in LABEL_VALUES:
        raise RecordError("label", f"unknown label {value!r}; expected one of {sorted(LABEL_VALUES)}")
    return 1 - LABEL_VALUES[key] if invert else LABEL_VALUES[key]


def _first(row: dict[str, Any], names: tuple[str, ...], field: str, optional: bool = False) -> Any:
    for n in names:
        if n in row and row[n] is not None:
            return row[n]
    if optional:
        return None
    raise RecordError(field, f"missing (looked for columns {list(names)})")


def row_example(
    row: Any, line: int, *, prefix: str, fields: FieldMap, split_sources: bool = False, invert: bool = False
) -> Example:
    """One row as an ``Example`` under a ``FieldMap``; ``group`` is resolved later when absent."""
    if not isinstance(row, dict):
        raise RecordError("<json>", f"expected an object, got {type(row).__name__}")
    context = nonempty(str(_first(row, fields.context, "context")), "context")
    question = _first(row, fields.question, "question", optional=fields.question_optional)
    answer = nonempty(str(_first(row, fields.answer, "answer")), "answer")
    label = parse_label(_first(row, fields.label, "label"), invert=invert)
    rid = _first(row, fields.id, "id", optional=True)
    group = _first(row, fields.group, "group", optional=True)
    source = prefix
    if split_sources:
        source = f"{prefix}_{str(_first(row, fields.source, 'source')).strip().lower()}"
    return Example(
        id=f"{prefix}-{rid if rid is not None else line}",
        source=source,
        context=context,
        question="" if question is None else str(question),
        answer=answer,
        label=label,
        group="" if group is None else f"{prefix}:{group}",
        meta={"line": str(line)},
    )


def read_rows(path: str | os.PathLike[str], col: Collector) -> Iterator[tuple[int, Any]]:
    """``(record number, row)`` from ``.jsonl``, ``.json``, ``.csv`` or ``.parquet``.

    A ``.json`` file holds a list or ``{"data": [...]}``; ``.parquet`` needs the optional ``pyarrow``.
    """
    path = Path(path)
    if not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file"
        raise ValueError(
            f"{path} is {what}; this builder reads one file of rows: .jsonl, .json, .csv or .parquet "
            "(e.g. NAME:data/halubench/test.jsonl)"
        )
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as err:
            raise ImportError(
                f"{path}: reading Parquet needs pyarrow (pip install pyarrow); or convert the file to JSONL"
            ) from err
        yield from enumerate(pq.read_table(path).to_pylist(), start=1)
    elif path.suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as f:
            # line numbers of the CSV file: the header is line 1
            yield from enumerate(csv.DictReader(f), start=2)
    elif path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = data.get("data") if isinstance(data, dict) else data
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a JSON list of rows or {{'data': [...]}}")
        yield from enumerate(rows, start=1)
    else:
        yield from read_json_lines(path, col)


def fill_groups(examples: Iterable[Example]) -> list[Example]:
    """Give examples without a group the group of their exact context (per source)."""
    from dataclasses import replace

    out: list[Example] = []
    ids: dict[tuple[str, str], int] = {}
    for ex in examples:
        if not ex.group:
            key = (ex.source, ex.context)
            ex = replace(ex, group=f"{ex.source}:ctx{ids.setdefault(key, len(ids))}")
        out.append(ex)
    return out
