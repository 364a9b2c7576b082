"""HaluBench (Ravi et al., 2024) with the paper's filtering, and the TRIVIA+ and PHANTOM loaders.

TRIVIA+ and PHANTOM read their releases' own column names (`TRIVIA_PLUS_FIELDS`,
`PHANTOM_FIELDS`), checked against the public dataset cards and files.

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
from ..io import RecordError
from ..leakage import balance_lengths, filings_linked, link_groups
from ..schema import Example, Split
from ._common import Collector, merge_near_duplicates
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
    return col.finish("halubench", seed=seed, link=False)  # linked (with the filings rule) when filtering


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


TRIVIA_PLUS_FIELDS = FieldMap(
    context=("article", "context"), question=("question",), answer=("answer",),
    label=("response_level_label_binary", "label"), group=("group",), id=("id",), source=("source",),
)  # fmt: skip
"""TRIVIA+ columns as released (``Triviaplus_all_withnoise_cleaned_*.parquet``, see its DATA_DETAILS.md):
``article`` (grounding document), ``question``, ``answer`` (the LLM response), the gold label
``response_level_label_binary`` (0 faithful, 1 unfaithful; the ``*_noise_*`` and ``*_ws_llm_aaj`` columns
are noisy training labels and are never read), ``source`` (drop, msmarco/ms_marco, nq, trivia, covid) and
``split`` (train, valid, test). The release has no id column (ids are row numbers). ``context``/``label``
are accepted as fallbacks for files converted to this package's names."""

PHANTOM_FIELDS = FieldMap(
    context=("context",), question=("query",), answer=("answer",),
    label=("ground_truth_label", "label"), group=("group", "doc_id"), id=("Unnamed: 0", "id"),
)  # fmt: skip
"""PHANTOM columns as released (``seyled/Phantom_Hallucination_Detection``, ``PhantomDataset/*.csv``):
``query``, ``context`` (the filing excerpt), ``answer``, ``ground_truth_label`` (``hallucination`` or
``not hallucination``) and pandas' index column ``Unnamed: 0`` (the id)."""

PHANTOM_10K_2000 = "PhantomDataset/Phantom_10k_2000tokens_middle.csv"
"""The split the paper uses (Appendix H): 10-K filings, 2,000-token documents with the answer-bearing
passage in the middle (980 rows, 490 per label)."""

_RELEASE_SPLITS: dict[str, Split] = {
    "train": "train", "valid": "validation", "validation": "validation", "dev": "validation", "test": "test",
}  # fmt: skip
_SOURCE_ALIASES = {"ms_marco": "msmarco"}


def phantom_file(kind: str = "10k", tokens: int | str = 2000, position: str = "middle") -> str:
    """Path of one PHANTOM release file inside the dataset repository.

    Args:
        kind: ``"10k"`` (10-K filings) or ``"def14a"`` (DEF 14A proxy statements).
        tokens: document length (2000, 5000, 10000, 20000, 30000) or ``"seed"`` (the seed triples).
        position: where the answer-bearing passage sits: ``beginning``, ``middle`` or ``end``.
    """
    if kind not in ("10k", "def14a"):
        raise ValueError(f"PHANTOM kind must be '10k' or 'def14a', got {kind!r}")
    if tokens == "seed":
        return f"PhantomDataset/Phantom_{kind}_seed.csv"
    if position not in ("beginning", "middle", "end"):
        raise ValueError(f"PHANTOM position must be beginning, middle or end, got {position!r}")
    return f"PhantomDataset/Phantom_{kind}_{int(tokens)}tokens_{position}.csv"


def _table_example(row: Any, line: int, name: str, fields: FieldMap, split_sources: bool) -> Example:
    ex = row_example(row, line, prefix=name, fields=fields, split_sources=split_sources)
    alias = _SOURCE_ALIASES.get(ex.source.removeprefix(f"{name}_"))
    if split_sources and alias:
        ex = replace(ex, source=f"{name}_{alias}")
    split = row.get("split") if isinstance(row, dict) else None
    if split is not None:
        key = str(split).strip().lower()
        if key not in _RELEASE_SPLITS:
            raise RecordError("split", f"unknown split {split!r}; expected one of {sorted(_RELEASE_SPLITS)}")
        ex = replace(ex, split=_RELEASE_SPLITS[key])
    return ex


def _build_table(
    name: str, path: str | os.PathLike[str], fields: FieldMap, seed: int, link: bool, *,
    split_sources: bool = False, release_splits: bool = False,
) -> Dataset:  # fmt: skip
    path = Path(path)
    col = Collector(str(path))
    for line, row in read_rows(path, col):
        col.add(str(path), line, partial(_table_example, row, line, name, fields, split_sources))
    exs = col.examples
    keep = release_splits and bool(exs) and all(e.split is not None for e in exs)
    if keep:  # groups are formed within each released split; count contexts the release shares across splits
        by_context: dict[tuple[str, str], set[str]] = {}
        for e in exs:
            by_context.setdefault((e.source, e.context), set()).add(str(e.split))
        shared = sum(len(v) > 1 for v in by_context.values())
        if shared:
            col.filtered["contexts shared across the release's splits (kept as released)"] = shared
        position = {id(x): n for n, x in enumerate(exs)}
        pairs: list[tuple[Example, Example]] = []
        for part in ("train", "validation", "test"):
            rows = [x for x in exs if x.split == part]
            pairs += zip(rows, _grouped(rows, link, part), strict=True)
        exs = [g for _, g in sorted(pairs, key=lambda p: position[id(p[0])])]  # file order
    else:
        exs = [replace(e, split=None) for e in exs]
        exs = _grouped(exs, link, "")
    col.examples = exs
    return col.finish(name, seed=seed, keep_splits=keep, link=False)  # linked above (if `link`)


def _grouped(exs: list[Example], link: bool, tag: str) -> list[Example]:
    """Exact-context groups for examples without a group column, then (``link``) near-duplicate merging."""
    exs = fill_groups(exs)
    if tag:
        exs = [replace(e, group=f"{e.group}@{tag}") for e in exs]
    return merge_near_duplicates(exs) if link else exs


def build_trivia_plus(
    path: str | os.PathLike[str], *, fields: FieldMap = TRIVIA_PLUS_FIELDS, seed: int = 42, link: bool = True,
    release_splits: bool = True,
) -> Dataset:  # fmt: skip
    """TRIVIA+ (Chen et al., 2026) from a local Parquet/JSONL/JSON/CSV file in the release's columns.

    Sources are ``trivia_plus_<source>`` (``ms_marco`` is merged into ``msmarco``, as the release notes
    they are one origin). With ``release_splits`` (default) and a ``split`` column on every row, the
    release's train/valid/test split is kept (the paper's 2,079 selection examples come from its train
    split); groups (exact contexts, merged when ``link`` finds near-duplicates) are formed within each
    split, and the report counts contexts that the release itself shares across splits. Otherwise
    whole groups are split 70/15/15 within every source and label (``seed``).
    """
    return _build_table(
        "trivia_plus", path, fields, seed, link, split_sources=True, release_splits=release_splits
    )


def build_phantom(
    path: str | os.PathLike[str], *, fields: FieldMap = PHANTOM_FIELDS, seed: int = 42, link: bool = True,
    file: str = PHANTOM_10K_2000,
) -> Dataset:  # fmt: skip
    """PHANTOM (Ji et al., 2025) from one release CSV, by default the paper's 10-K 2,000-token split.

    Args:
        path: a release file, or the dataset folder (a snapshot of
            ``seyled/Phantom_Hallucination_Detection``), in which case ``file`` is read from it.
        fields: column names (`PHANTOM_FIELDS`).
        seed: seed of the 70/15/15 group split.
        link: merge groups whose contexts are near-duplicates (5-gram rule).
        file: the release file read from a folder (`phantom_file`; default `PHANTOM_10K_2000`).

    Groups: the hallucinated and faithful answers of one question share its context, so exact contexts
    form groups, merged across near-duplicate excerpts of the same filing when ``link``.
    """
    path = Path(path)
    if path.is_dir():
        target = path / file
        if not target.is_file():
            raise FileNotFoundError(
                f"PHANTOM: {target} not found; expected the release file {file!r} under {path}"
            )
        path = target
    return _build_table("phantom", path, fields, seed, link)
