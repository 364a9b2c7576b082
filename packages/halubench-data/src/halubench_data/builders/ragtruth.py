"""RAGTruth (Niu et al., 2024): from the original release files or from FaithJudge's test subset.

Mapping, both formats: one example per response. ``context`` = the retrieved passages (QA), the
news article (Summary) or the Yelp business JSON (Data2txt, compact ``json.dumps``); ``question`` =
the user question (QA) or a fixed task instruction (Summary, Data2txt); ``answer`` = the response;
``label`` = 1 when annotators marked any span; ``spans`` = those character spans (end exclusive)
with their ``label_type``; ``group`` = ``ragtruth:<source_id>`` (all responses to one source stay
in one split); ``source`` = ``ragtruth_qa`` / ``ragtruth_summary`` / ``ragtruth_data2txt``;
``meta`` = ``model``, ``task``, ``source_id`` (+ ``response_id``, ``original_split`` from the
original release). Splits: our own 70/15/15 by group within every source and label (seed 42).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..dataset import Dataset
from ..io import RecordError
from ..schema import Example, Span
from ._common import Collector, need, nonempty, read_json_lines

TASKS: tuple[str, ...] = ("QA", "Summary", "Data2txt")
INSTRUCTIONS = {
    "Summary": "Summarize the following news article.",
    "Data2txt": "Write an objective overview of the business described by the structured data.",
}
_FAITHJUDGE_FILES = {
    "QA": "ragtruth_qa.jsonl",
    "Summary": "ragtruth_summary.jsonl",
    "Data2txt": "ragtruth_data2txt.jsonl",
}


def _task_of(source: Any) -> str:
    if isinstance(source, str):
        return "Summary"
    if isinstance(source, dict):
        return "QA" if "question" in source and "passages" in source else "Data2txt"
    raise RecordError("source", f"expected an object or a string, got {type(source).__name__}")


def _context_question(task: str, source: Any) -> tuple[str, str]:
    if task == "QA":
        if not isinstance(source, dict):
            raise RecordError("source", "QA source must be an object with question and passages")
        return nonempty(need(source, "passages"), "source.passages"), nonempty(
            need(source, "question"), "source.question"
        )
    if task == "Summary":
        if not isinstance(source, str):
            raise RecordError("source", "Summary source must be a string")
        return nonempty(source, "source"), INSTRUCTIONS["Summary"]
    return json.dumps(source, ensure_ascii=False), INSTRUCTIONS["Data2txt"]


def _spans(labels: Any, response: str) -> tuple[Span, ...]:
    if not isinstance(labels, list):
        raise RecordError("labels", f"expected a list, got {type(labels).__name__}")
    out = []
    for i, lab in enumerate(labels):
        start, end = need(lab, "start", int), need(lab, "end", int)
        if not 0 <= start < end <= len(response):
            raise RecordError(
                "labels", f"span {i} [{start}, {end}) outside the {len(response)}-character response"
            )
        text = lab.get("text")
        if text is not None and response[start:end] != text:
            raise RecordError("labels", f"span {i} text does not match response[{start}:{end}]")
        out.append(Span(start, end, str(lab.get("label_type", "hallucination"))))
    return tuple(out)


def _example(task: str, source_id: Any, source: Any, resp: Any, idx: str, extra: dict[str, str]) -> Example:
    response = nonempty(need(resp, "response"), "response")
    model = need(resp, "model")
    context, question = _context_question(task, source)
    spans = _spans(resp.get("labels", []), response)
    return Example(
        id=f"ragtruth-{source_id}-{idx}",
        source=f"ragtruth_{task.lower()}",
        context=context,
        question=question,
        answer=response,
        label=int(bool(spans)),
        group=f"ragtruth:{source_id}",
        spans=spans,
        meta={"model": model, "task": task, "source_id": str(source_id), **extra},
    )


def _keep(
    col: Collector, task: str, model: Any, tasks: tuple[str, ...], models: tuple[str, ...] | None
) -> bool:
    if task not in tasks:
        col.filtered[f"task not in {list(tasks)}"] += 1
        return False
    if models is not None and model not in models:
        col.filtered[f"model not in {list(models)}"] += 1
        return False
    return True


def _check_filters(
    tasks: Iterable[str], models: Iterable[str] | None
) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    tasks = tuple(tasks)
    bad = [t for t in tasks if t not in TASKS]
    if bad:
        raise ValueError(f"unknown RAGTruth tasks {bad}; expected some of {TASKS}")
    return tasks, (tuple(models) if models is not None else None)


def _faithjudge_files(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    found = [path / f for f in _FAITHJUDGE_FILES.values() if (path / f).exists()]
    if not found:
        raise FileNotFoundError(f"no ragtruth_{{qa,summary,data2txt}}.jsonl in {path}")
    yield from found


def build_ragtruth(
    path: str | os.PathLike[str],
    *,
    tasks: Iterable[str] = TASKS,
    models: Iterable[str] | None = None,
    seed: int = 42,
) -> Dataset:
    """RAGTruth from FaithJudge's files (one source per line with all its responses).

    Args:
        path: a folder holding ``ragtruth_{qa,summary,data2txt}.jsonl``, or one such file.
        tasks: tasks to keep (``QA``, ``Summary``, ``Data2txt``); the task is read from the source's shape.
        models: generators to keep (e.g. ``["llama-2-70b-chat"]``); ``None`` keeps all.
        seed: seed of the group split.

    Returns:
        The dataset; ``report`` counts responses read, filtered (by task/model) and dropped.
    """
    tasks, models = _check_filters(tasks, models)
    path = Path(path)
    col = Collector(str(path))
    for file in _faithjudge_files(path):
        for lineno, row in read_json_lines(file, col):
            try:
                source_id, responses = need(row, "source_id", (int, str)), need(row, "responses", list)
                task = _task_of(need(row, "source", (dict, str)))
            except RecordError as err:
                col.drop(str(file), lineno, err.field, err.reason)
                continue
            for k, resp in enumerate(responses):
                model = resp.get("model") if isinstance(resp, dict) else None

                def make(
                    resp: Any = resp,
                    k: int = k,
                    model: Any = model,
                    task: str = task,
                    sid: Any = source_id,
                    source: Any = row["source"],
                ) -> Example | None:
                    if not _keep(col, task, model, tasks, models):
                        return None
                    return _example(task, sid, source, resp, f"{k}", {})

                col.add(f"{file} (response {k})", lineno, make)
    return col.finish("ragtruth", seed=seed)


def build_ragtruth_original(
    path: str | os.PathLike[str],
    *,
    tasks: Iterable[str] = TASKS,
    models: Iterable[str] | None = None,
    seed: int = 42,
) -> Dataset:
    """RAGTruth from its original release: ``response.jsonl`` + ``source_info.jsonl`` in one folder.

    ``source_info.jsonl`` rows: ``source_id``, ``task_type``, ``source_info`` (QA: question and
    passages; Summary: article; Data2txt: business JSON). ``response.jsonl`` rows: ``id``,
    ``source_id``, ``model``, ``response``, ``labels`` (start, end, text, label_type, ...),
    ``split``, ``quality``. The original train/test split is kept in ``meta["original_split"]``;
    the splits used are our own group split (the release has no validation split).
    """
    tasks, models = _check_filters(tasks, models)
    folder = Path(path)
    col = Collector(str(folder))
    sources: dict[str, tuple[str, Any]] = {}
    info_path = folder / "source_info.jsonl"
    for lineno, row in read_json_lines(info_path, col):
        try:
            sid = str(need(row, "source_id", (int, str)))
            task = need(row, "task_type")
            if task not in TASKS:
                raise RecordError("task_type", f"unknown task {task!r}; expected one of {TASKS}")
            sources[sid] = (task, need(row, "source_info", (dict, str)))
        except RecordError as err:
            col.drop(str(info_path), lineno, err.field, err.reason)
    col.n_read = 0  # the report counts responses, not sources
    resp_path = folder / "response.jsonl"
    for lineno, row in read_json_lines(resp_path, col):

        def make(row: Any = row, lineno: int = lineno) -> Example | None:
            sid = str(need(row, "source_id", (int, str)))
            if sid not in sources:
                raise RecordError("source_id", f"source {sid} not in source_info.jsonl")
            task, source = sources[sid]
            if not _keep(col, task, row.get("model"), tasks, models):
                return None
            extra = {"response_id": str(row.get("id", "")), "original_split": str(row.get("split", ""))}
            return _example(task, sid, source, row, str(row.get("id", lineno)), extra)

        col.add(str(resp_path), lineno, make)
    return col.finish("ragtruth-original", seed=seed)
