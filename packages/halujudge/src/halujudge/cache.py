"""An append-only JSONL cache of scores, so an interrupted scoring run resumes where it stopped.

Each line is one JSON object ``{"model", "method", "id", "text_hash", "score"}``. A line is written with one
``write`` call on a file opened for appending, then flushed and synced, so a crash can at worst leave a
partial last line; opening the cache tolerates that line, reports it in
[`ScoreCache.dropped_partial`][halujudge.ScoreCache.dropped_partial] and cuts it off so later appends start on
a fresh line. A malformed line anywhere else is an error.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

__all__ = ["ScoreCache", "text_hash"]

CacheKey = tuple[str, str, str, str]


def text_hash(*parts: str) -> str:
    """SHA-256 (hex, first 32 characters) of the parts joined by a NUL byte."""
    digest = hashlib.sha256("\0".join(parts).encode("utf-8"))
    return digest.hexdigest()[:32]


class ScoreCache:
    """Scores keyed by (model id, method, example id, text hash), stored as JSONL.

    ``method`` is the judge template name or the checker name. The text hash covers everything that was
    scored (for a judge: the full prompt after the chat template), so editing an example or a template
    never returns a stale score.

    Args:
        path: the JSONL file; created (with its folder) on the first write.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.dropped_partial: bool = False
        """Whether opening the cache found and removed a partial last line (an interrupted write)."""
        self._scores: dict[CacheKey, float] = {}
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        lines = data.split(b"\n")
        good_end = 0
        for number, raw in enumerate(lines, start=1):
            is_last = number == len(lines)
            if not raw.strip():
                good_end += len(raw) + (0 if is_last else 1)
                continue
            try:
                record = json.loads(raw)
                key = (
                    str(record["model"]),
                    str(record["method"]),
                    str(record["id"]),
                    str(record["text_hash"]),
                )
                score = float(record["score"])
                if not math.isfinite(score):
                    raise ValueError(f"score {score} is not a finite number")
            except (ValueError, KeyError, TypeError) as err:
                if is_last:  # no trailing newline: an interrupted append
                    self.dropped_partial = True
                    break
                raise ValueError(
                    f"{self.path}:{number}: malformed cache line ({err}); expected a JSON object with "
                    "model, method, id, text_hash and score. Delete the line or the file to rescore."
                ) from err
            if is_last:  # a complete record without its newline is still a partial write
                self.dropped_partial = True
                break
            self._scores[key] = score
            good_end += len(raw) + 1
        if self.dropped_partial:
            with open(self.path, "r+b") as handle:
                handle.truncate(good_end)

    def __len__(self) -> int:
        return len(self._scores)

    def get(self, model: str, method: str, example_id: str, digest: str) -> float | None:
        """The cached score, or None when this (model, method, example, text) was never scored."""
        return self._scores.get((model, method, example_id, digest))

    def put_many(self, records: list[tuple[str, str, str, str, float]]) -> None:
        """Append scores and make them durable before returning.

        Args:
            records: ``(model, method, example_id, text_hash, score)`` tuples.

        Raises:
            ValueError: if a score is not a finite number.
        """
        if not records:
            return
        lines = []
        for model, method, example_id, digest, score in records:
            if not math.isfinite(score):
                raise ValueError(f"score for example {example_id!r} is {score}; expected a finite number")
            entry = {"model": model, "method": method, "id": example_id, "text_hash": digest, "score": score}
            lines.append(json.dumps(entry, ensure_ascii=False) + "\n")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write("".join(lines))
            handle.flush()
            os.fsync(handle.fileno())
        for model, method, example_id, digest, score in records:
            self._scores[(model, method, example_id, digest)] = float(score)
