"""Plumbing shared by the builders: reading rows, counting drops and filters, group splits."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..dataset import Dataset, Drop, LoadReport
from ..io import RecordError
from ..leakage import UnionFind, assign_splits, link_groups
from ..schema import Example


class Collector:
    """Accumulates examples, dropped records (with file, line, field) and filter counts."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.examples: list[Example] = []
        self.drops: list[Drop] = []
        self.filtered: Counter[str] = Counter()
        self.n_read = 0

    def add(self, path: str, line: int, make: Callable[[], Example | None]) -> None:
        """Count one record; keep its example, or record why it was dropped.

        ``make`` returns ``None`` for a record removed by a documented filter (it counted it itself).
        """
        self.n_read += 1
        try:
            ex = make()
        except RecordError as err:
            self.drops.append(Drop(path, line, err.field, err.reason))
            return
        except (TypeError, ValueError, KeyError) as err:
            self.drops.append(Drop(path, line, "<record>", f"{type(err).__name__}: {err}"))
            return
        if ex is not None:
            self.examples.append(ex)

    def drop(self, path: str, line: int, field: str, reason: str) -> None:
        """Record a record that could not even be read (e.g. malformed JSON)."""
        self.n_read += 1
        self.drops.append(Drop(path, line, field, reason))

    def finish(self, name: str, *, seed: int = 42, keep_splits: bool = False, link: bool = True) -> Dataset:
        """The dataset with splits by group (70/15/15 within every source and label) and its report.

        With ``link`` (every builder's default), groups whose contexts are near-duplicates by the
        paper's 5-gram rule are merged first (`merge_near_duplicates`), so no near-duplicate context
        crosses splits.
        """
        if link and not keep_splits:
            self.examples = merge_near_duplicates(self.examples)
        ds = Dataset(tuple(self.examples), name)
        if not keep_splits and len(ds):
            ds = ds.with_splits(assign_splits(ds.groups, [(e.source, e.label) for e in ds], seed=seed))
        report = LoadReport(self.source, self.n_read, len(ds), tuple(self.drops), dict(self.filtered))
        return Dataset(ds.examples, name, report)


def merge_near_duplicates(exs: list[Example]) -> list[Example]:
    """Merge groups that share an example or hold near-duplicate contexts (the 5-gram rule), per source.

    A group and every group linked to it by a near-duplicate context become one group, named after
    its first member in input order (the original groups are kept whole, never split).
    """
    if not exs:
        return exs
    linked = link_groups([e.context for e in exs], [e.source for e in exs], prefix="\x00lnk")
    names = list(dict.fromkeys([*(e.group for e in exs), *linked]))  # groups first: they name the merge
    index = {g: k for k, g in enumerate(names)}
    uf = UnionFind(len(names))
    for e, g in zip(exs, linked, strict=True):
        uf.union(index[e.group], index[g])
    first: dict[int, str] = {}
    for e in exs:
        first.setdefault(uf.find(index[e.group]), e.group)
    return [replace(e, group=first[uf.find(index[e.group])]) for e in exs]


def read_json_lines(path: str | os.PathLike[str], col: Collector) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, object)`` of a JSONL file; malformed lines go to ``col`` as drops."""
    with Path(path).open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as err:
                col.drop(str(path), lineno, "<json>", f"malformed JSON ({err.msg} at column {err.colno})")


def need(rec: Any, name: str, kind: type | tuple[type, ...] = str) -> Any:
    """``rec[name]`` checked for presence and type; raises ``RecordError`` naming the field."""
    if not isinstance(rec, dict):
        raise RecordError("<json>", f"expected a JSON object, got {type(rec).__name__}")
    if name not in rec or rec[name] is None:
        raise RecordError(name, "missing")
    value = rec[name]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        want = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise RecordError(name, f"expected {want}, got {type(value).__name__}")
    return value


def nonempty(text: str, name: str) -> str:
    """``text`` unless it is blank (then ``RecordError`` naming ``name``)."""
    if not text.strip():
        raise RecordError(name, "empty")
    return text
