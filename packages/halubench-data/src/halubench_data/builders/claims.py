"""Claim-level grounding sets: WiCE, LFQA, ClaimVerify's source and ExpertQA (LLM-AggreFact format).

Rows are ``(dataset, doc, claim, label, ...)`` where **their** ``label`` 1 means the document
*supports* the claim. Mapping: ``context`` = ``doc``; ``answer`` = ``claim``; ``question`` = the
row's ``question`` (LFQA, ClaimVerify, ExpertQA) or the neutral ``NEUTRAL_QUESTION`` (WiCE);
``label`` = ``1 - theirs`` (1 = not supported = hallucinated). Groups: LFQA by ``question_id``,
ClaimVerify and ExpertQA by question, WiCE by ``claim_title`` (claims from one Wikipedia
article). The original split (``dev``/``test``/``test_sampled500``) is kept in ``meta``; the splits
used are our own 70/15/15 by group within every source and label (seed 42).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from ..dataset import Dataset
from ..io import RecordError
from ..schema import Example
from ._common import Collector, need, nonempty, read_json_lines

NEUTRAL_QUESTION = "Is the following claim supported by the document?"
CLAIM_FILES = {
    "wice": ("wice_dev.jsonl", "wice_test.jsonl"),
    "lfqa": ("lfqa.jsonl",),
    "claimverify": ("claimverify_source_attributionbench.jsonl",),
    "expertqa": ("expertqa_attributionbench.jsonl",),
}


def supported_to_label(theirs: Any) -> int:
    """Convert a support label (1 = supported, 0 = not) to ours (1 = hallucinated).

    Raises:
        RecordError: on any value other than 0 or 1 (field ``label``).
    """
    if isinstance(theirs, bool) or theirs not in (0, 1):
        raise RecordError("label", f"unknown label {theirs!r}; expected 1 (supported) or 0 (not supported)")
    return 1 - int(theirs)


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _group(name: str, row: dict[str, Any]) -> str:
    if name == "lfqa":
        return f"lfqa:q{need(row, 'question_id', (int, str))}"
    if name == "wice":
        title = row.get("claim_title")
        return f"wice:{title}" if isinstance(title, str) and title else f"wice:doc-{_digest(row['doc'])}"
    return f"{name}:{_digest(need(row, 'question'))}"


def claim_example(name: str, row: Any, row_id: str) -> Example:
    """One claim-level row as an ``Example`` (see the module docstring for the mapping)."""
    doc = nonempty(need(row, "doc"), "doc")
    claim = nonempty(need(row, "claim"), "claim")
    label = supported_to_label(need(row, "label", int))
    question = row.get("question") if name != "wice" else None
    meta = {"dataset": str(row.get("dataset", name))}
    for key in ("split", "orig_label", "source_id", "answer_setting", "question_id"):
        if row.get(key) is not None:
            meta[f"original_{key}" if key == "split" else key] = str(row[key])
    return Example(
        id=f"{name}-{row_id}",
        source=name,
        context=doc,
        question=question if isinstance(question, str) and question.strip() else NEUTRAL_QUESTION,
        answer=claim,
        label=label,
        group=_group(name, row),
        meta=meta,
    )


def _files(name: str, path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    found = [path / f for f in CLAIM_FILES[name] if (path / f).exists()]
    if not found:
        raise FileNotFoundError(f"none of {list(CLAIM_FILES[name])} in {path}")
    yield from found


def build_claims(name: str, path: str | os.PathLike[str], *, seed: int = 42) -> Dataset:
    """Build one claim-level set.

    Args:
        name: ``"wice"``, ``"lfqa"``, ``"claimverify"`` or ``"expertqa"``.
        path: the file, or the folder holding it (``llm-aggrefact/`` or ``expertqa/``); for WiCE a
            folder gives dev and test together.
        seed: seed of the group split.
    """
    if name not in CLAIM_FILES:
        raise ValueError(f"unknown claim set {name!r}; expected one of {sorted(CLAIM_FILES)}")
    path = Path(path)
    col = Collector(str(path))
    for file in _files(name, path):
        for lineno, row in read_json_lines(file, col):
            col.add(str(file), lineno, partial(claim_example, name, row, f"{file.stem}-{lineno}"))
    return col.finish(name, seed=seed)


def build_wice(path: str | os.PathLike[str], *, seed: int = 42) -> Dataset:
    """``build_claims("wice", path)``: WiCE dev + test (a folder) or one WiCE file."""
    return build_claims("wice", path, seed=seed)


def build_lfqa(path: str | os.PathLike[str], *, seed: int = 42) -> Dataset:
    """``build_claims("lfqa", path)``: LFQA, grouped by ``question_id``."""
    return build_claims("lfqa", path, seed=seed)


def build_claimverify(path: str | os.PathLike[str], *, seed: int = 42) -> Dataset:
    """``build_claims("claimverify", path)``: ClaimVerify's source rows (AttributionBench)."""
    return build_claims("claimverify", path, seed=seed)


def build_expertqa(path: str | os.PathLike[str], *, seed: int = 42) -> Dataset:
    """``build_claims("expertqa", path)``: ExpertQA claims (AttributionBench)."""
    return build_claims("expertqa", path, seed=seed)
