"""HaluBench (Ravi et al., 2024) with the paper's filtering, and the TRIVIA+ and PHANTOM loaders.

HaluBench rows (the hub's shape): ``id``, ``passage``, ``question``, ``answer``, ``label``
(``PASS`` = faithful, ``FAIL`` = hallucinated), ``source_ds`` (``halueval``, ``RAGTruth``,
``FinanceBench``, ``DROP``, ``covidQA``, ``pubmedQA``). The paper's filters (Appendix K):

1. HaluEval is subsampled to equally many faithful and hallucinated answers at every answer length
   in words (``balance_lengths``): its faithful answers are short entity names and its
   hallucinated ones long sentences, so length alone would give 0.97 AUROC there.
2. Contexts are linked within each source when >= 30% of the shorter one's word 5-grams occur in
   the other; FinanceBench filings also by word-set Jaccard >= 0.6 or >= 6 shared long non-year
   numbers. Groups = connected components, so near-duplicate contexts never straddle splits.
3. Whole groups go to splits approaching 70/15/15 within every source and label (seed 42).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from ..dataset import Dataset
from ..leakage import balance_lengths, filings_linked, link_groups
from ..schema import Example
from ._common import Collector
from .tabular import FieldMap, fill_groups, read_rows, row_example

HALUBENCH_FIELDS = FieldMap(
    context=("passage",), question=("question",), answer=("answer",), label=("label",), group=(), id=("id",),
    source=("source_ds",),
)  # fmt: skip


def _halubench_filter(col: Collector, seed: int) -> None:
    exs = col.examples
    halueval = [i for i, e in enumerate(exs) if e.source == "halubench_halueval"]
    if halueval:
        keep = balance_lengths(
            [len(exs[i].answer.split()) for i in halueval], [exs[i].label for i in halueval], seed=seed
        )
        kept = {halueval[k] for k in keep}
        col.filtered["HaluEval length balancing"] += len(halueval) - len(kept)
        exs = [e for i, e in enumerate(exs) if e.source != "halubench_halueval" or i in kept]
    groups = link_groups(
        [e.context for e in exs], [e.source for e in exs],
        extra_rules={"halubench_financebench": filings_linked}, prefix="halubench-grp",
    )  # fmt: skip
    col.examples = [replace(e, group=g) for e, g in zip(exs, groups, strict=True)]


def _from_rows(
    rows: Iterable[tuple[int, Any]], col: Collector, where: str, seed: int, apply_filters: bool
) -> Dataset:
    for line, row in rows:
        make = partial(
            row_example, row, line, prefix="halubench", fields=HALUBENCH_FIELDS, split_sources=True
        )
        col.add(where, line, make)
    if apply_filters:
        _halubench_filter(col, seed)
    else:
        col.examples = fill_groups(col.examples)
    return col.finish("halubench", seed=seed)


def build_halubench(path: str | os.PathLike[str], *, apply_filters: bool = True, seed: int = 42) -> Dataset:
    """HaluBench from a local JSONL/JSON/CSV file in the hub's row shape, filtered as in the paper.

    Args:
        path: the file.
        apply_filters: apply HaluEval length balancing and near-duplicate grouping (``False``: exact
            contexts as groups, every row kept; for measuring the unfiltered benchmark).
        seed: seed of the balancing and of the group split.

    Returns:
        Sources ``halubench_<source_ds lower-cased>``; the report counts the HaluEval rows removed.
    """
    col = Collector(str(path))
    return _from_rows(read_rows(path, col), col, str(path), seed, apply_filters)


def halubench_from_hub_rows(
    rows: Iterable[Mapping[str, Any]], *, apply_filters: bool = True, seed: int = 42
) -> Dataset:
    """Convert rows shaped like the hub's ``PatronusAI/HaluBench`` test split (see module docstring)."""
    col = Collector("hub:PatronusAI/HaluBench")
    return _from_rows(
        enumerate((dict(r) for r in rows), start=1), col, "hub:PatronusAI/HaluBench", seed, apply_filters
    )


def load_halubench_from_hub(*, apply_filters: bool = True, seed: int = 42) -> Dataset:
    """Download HaluBench with ``datasets`` (extra ``hub``) and convert it. Needs network access."""
    try:
        import datasets
    except ImportError as err:  # pragma: no cover - depends on the optional extra
        raise ImportError("install the 'hub' extra: pip install 'halubench-data[hub]'") from err
    rows = datasets.load_dataset("PatronusAI/HaluBench", split="test")
    return halubench_from_hub_rows(rows, apply_filters=apply_filters, seed=seed)


TRIVIA_PLUS_FIELDS = FieldMap()
"""TRIVIA+ columns: context/passage, question, answer/response, label, optional group/id columns."""
PHANTOM_FIELDS = FieldMap(
    context=("context", "chunk", "document", "doc"),
    question=("query", "question"),
    answer=("answer", "response"),
    label=("label", "is_hallucinated", "hallucinated", "hallucination"),
    group=("doc_id", "document_id", "file_name", "filename", "company", "source_id"),
)
"""PHANTOM columns: the filing chunk, the query, the answer and its label, grouped by filing."""


def _build_table(name: str, path: str | os.PathLike[str], fields: FieldMap, seed: int, link: bool) -> Dataset:
    path = Path(path)
    col = Collector(str(path))
    for line, row in read_rows(path, col):
        col.add(str(path), line, partial(row_example, row, line, prefix=name, fields=fields))
    exs: list[Example] = fill_groups(col.examples)
    if link:  # also merge groups whose contexts are near-duplicates (5-gram rule)
        linked = link_groups([e.context for e in exs], [e.source for e in exs], prefix="lnk")
        merged: dict[str, str] = {}
        for e, g in zip(exs, linked, strict=True):
            merged.setdefault(g, e.group)
        exs = [replace(e, group=merged[g]) for e, g in zip(exs, linked, strict=True)]
    col.examples = exs
    return col.finish(name, seed=seed)


def build_trivia_plus(
    path: str | os.PathLike[str], *, fields: FieldMap = TRIVIA_PLUS_FIELDS, seed: int = 42, link: bool = True
) -> Dataset:
    """TRIVIA+ (Chen et al., 2026) from a local JSONL/JSON/CSV file; see ``FieldMap`` for columns.

    Groups: the group column when present, else identical contexts; with ``link``, groups whose
    contexts are near-duplicates (>= 30% shared word 5-grams) are merged.
    """
    return _build_table("trivia_plus", path, fields, seed, link)


def build_phantom(
    path: str | os.PathLike[str], *, fields: FieldMap = PHANTOM_FIELDS, seed: int = 42, link: bool = True
) -> Dataset:
    """PHANTOM (Ji et al., 2025) from a local JSONL/JSON/CSV file, grouped by filing (``PHANTOM_FIELDS``)."""
    return _build_table("phantom", path, fields, seed, link)
