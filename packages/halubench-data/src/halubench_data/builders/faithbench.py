"""FaithBench (Bao et al., 2025): summaries by ten LLMs with human span annotations.

Reads FaithJudge's ``faithbench_summary.jsonl`` (one source article per line with its summaries).
Mapping: ``context`` = the article; ``question`` = ``INSTRUCTION``; ``answer`` = the summary;
``label`` = 1 when any annotator marked an ``Unwanted`` span (``strict=True``: also
``Questionable``); ``spans`` = those annotated summary spans (deduplicated); ``group`` =
``faithbench:<source_id>``; ``meta`` = ``model`` and the majority label. ``Benign`` spans
(unsupported but harmless) do not make a summary hallucinated.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

from ..dataset import Dataset
from ..io import RecordError
from ..schema import Example, Span
from ._common import Collector, need, nonempty, read_json_lines

INSTRUCTION = "Summarize the following passage."


def _bad_labels(strict: bool) -> tuple[str, ...]:
    return ("Unwanted", "Questionable") if strict else ("Unwanted",)


def faithbench_example(source_id: str, article: str, summ: Any, strict: bool = False) -> Example:
    """One FaithJudge FaithBench summary as an ``Example``."""
    summary = nonempty(need(summ, "summary"), "summary")
    annotations = need(summ, "annotations", list)
    spans: set[Span] = set()
    hallucinated = False
    for per_annotator in annotations:
        for ann in per_annotator if isinstance(per_annotator, list) else [per_annotator]:
            labels = need(ann, "label", list)
            if not any(str(lab).split(".")[0] in _bad_labels(strict) for lab in labels):
                continue
            hallucinated = True
            start, end = ann.get("summary_start"), ann.get("summary_end")
            if isinstance(start, int) and isinstance(end, int):
                if not 0 <= start < end <= len(summary):
                    raise RecordError("annotations", f"span [{start}, {end}) outside the summary")
                spans.add(Span(start, end, str(labels[-1])))
    return Example(
        id=f"faithbench-{need(summ, 'sample_id', (str, int))}",
        source="faithbench",
        context=article,
        question=INSTRUCTION,
        answer=summary,
        label=int(hallucinated),
        group=f"faithbench:{source_id}",
        spans=tuple(sorted(spans, key=lambda s: (s.start, s.end, s.label))),
        meta={
            "model": str(summ.get("meta_model", "")),
            "majority": str(summ.get("computed_ground_truth_label_majority", "")),
        },
    )


def build_faithbench(path: str | os.PathLike[str], *, strict: bool = False, seed: int = 42) -> Dataset:
    """FaithBench from ``faithbench_summary.jsonl`` (a file, or the folder holding it).

    Args:
        path: the file or its folder.
        strict: also count ``Questionable`` spans as hallucinations.
        seed: seed of the group split.
    """
    path = Path(path)
    file = path / "faithbench_summary.jsonl" if path.is_dir() else path
    col = Collector(str(file))
    for lineno, row in read_json_lines(file, col):
        try:
            source_id = str(need(row, "source_id", (str, int)))
            article = nonempty(need(row, "source"), "source")
            summaries = need(row, "summaries", list)
        except RecordError as err:
            col.drop(str(file), lineno, err.field, err.reason)
            continue
        for k, summ in enumerate(summaries):
            col.add(
                f"{file} (summary {k})",
                lineno,
                partial(faithbench_example, source_id, article, summ, strict),
            )
    return col.finish("faithbench", seed=seed)
