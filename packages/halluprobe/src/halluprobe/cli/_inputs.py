"""Reading ``halluprobe predict --input``: JSON lines of answers to score, checked line by line."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from halubench_data.cliargs import MAX_INPUT_BYTES, UsageError


@dataclass
class InputRows:
    """The answers of a ``--input`` file, in file order."""

    ids: list[str] = field(default_factory=list)
    """Each line's ``id`` as a string (its line number when it has none)."""
    triples: list[tuple[str, str, str]] = field(default_factory=list)
    """``(context, question, answer)`` of each line."""
    lines: list[int] = field(default_factory=list)
    """Each answer's line number in the file (1-based), for ``FILE:LINE`` messages."""


def check_detector_arg(path: str | None) -> None:
    """The detector folder and its ``detector.json``, checked before torch loads.

    ``path`` None is the default detector (`halluprobe.detectors._default`). The file must be readable,
    every field present and in range, and the proxy findable.

    Raises:
        FileNotFoundError, NotADirectoryError, ValueError: naming the folder, the file and the field.
    """
    from halubench_data.cliargs import check_model_arg

    from halluprobe.detectors._default import check_default
    from halluprobe.detectors._detector_file import check_document, check_format, read_document

    folder = check_default() if path is None else Path(path).expanduser()
    doc = read_document(folder, "detector.json")
    where = str(folder / "detector.json")
    if isinstance(doc, dict) and doc.get("kind") == "reader":  # a fine-tuned reader's own fields
        from halluprobe.reader._file import check_document as check_reader

        check_reader(doc, where)
    else:
        check_format(doc, where)
        check_document(doc, where)
    proxy = doc.get("proxy")
    if isinstance(proxy, str):  # a hub id that an offline install lacks fails now, not after retries
        check_model_arg(proxy, f"the proxy of detector {folder}:")


def read_triples(path: Path) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Ids and ``(context, question, answer)`` triples of a JSON-lines file (``--input``); see `read_rows`."""
    rows = read_rows(path)
    return rows.ids, rows.triples


def read_rows(path: Path) -> InputRows:
    """The ids, ``(context, question, answer)`` triples and line numbers of a JSON-lines file (``--input``).

    A line's ``id`` (a string or an integer) is its id as a string; a missing or null ``id`` gives the
    line number. Blank lines are skipped. The file must be regular and at most ``MAX_INPUT_BYTES``.

    Raises:
        UsageError: the file is larger than ``MAX_INPUT_BYTES``.
        ValueError: ``path:line: ...`` for a line that is not UTF-8, not a JSON object with string
            ``context`` and ``answer`` (``question`` and ``id`` optional), or whose answer is empty.
    """
    from halubench_data.io import BOM, is_unicode

    rows = InputRows()
    if Path(path).stat().st_size > MAX_INPUT_BYTES:
        raise UsageError(f"--input {path} is larger than {MAX_INPUT_BYTES} bytes; split it")
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            if n == 1:
                raw = raw.removeprefix(BOM)  # a UTF-8 byte order mark (Windows editors write one)
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}:{n}: not UTF-8 (byte {exc.start + 1} of the line)") from None
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: malformed JSON ({exc.msg})") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{n}: expected a JSON object with 'context' and 'answer'")
            for key in ("context", "answer", "question"):
                if not isinstance(rec.get(key, ""), str) or (key != "question" and key not in rec):
                    raise ValueError(f"{path}:{n}: field {key!r} must be a string")
                if not is_unicode(rec.get(key, "")):
                    raise ValueError(f"{path}:{n}: field {key!r} is not valid Unicode (a lone surrogate)")
            if not rec["answer"].strip():
                raise ValueError(f"{path}:{n}: the answer is empty")
            item_id = rec.get("id")
            if item_id is not None and (isinstance(item_id, bool) or not isinstance(item_id, str | int)):
                raise ValueError(f"{path}:{n}: field 'id' must be a string or an integer")
            rows.ids.append(str(n if item_id is None else item_id))
            rows.triples.append((rec["context"], rec.get("question", ""), rec["answer"]))
            rows.lines.append(n)
    if not rows.triples:
        raise ValueError(f"{path}: no answers to score")
    return rows
