"""A resumable, content-keyed cache of `ExampleRecord` shards (safetensors + JSON index).

Layout of a cache folder:

```text
index.json                      # format version and the list of shards with their record keys
shard-<random hex>.safetensors  # one per extracted batch, named uniquely per writer
.lock                           # taken (flock) while the index is read-modified-written
parts/rank-00000/               # a distributed extraction: one part per rank (its own index and shards),
parts/rank-00001/               # listed in index.json by rank 0 when the ranks are done
```

Records are keyed by the SHA-256 of the extraction settings (proxy, layers, chat template, ...) and the
example's id, context, question and answer (`FeatureCache.key`): an example edited under the same id,
another dataset with overlapping ids, or other settings never return stale records; they are computed
again. Every file is written to a temporary name and renamed into place; a shard becomes part of the
cache only when the index that lists it is renamed into place, under the lock, after re-reading the
index, so concurrent writers into one folder keep each other's shards, and a record that another
writer published first is not written again (each key is cached once). A shard that is missing, damaged
or named outside the folder costs only its own records (dropped from the index, computed again), and
temporary files older than `STALE_TMP_SECONDS` (a killed write) are removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import time
import warnings
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
from halubench_data.files import atomic_path, atomic_write_bytes
from safetensors.numpy import load_file, save_file

from halluprobe.features._records import ExampleRecord

CACHE_FORMAT = 2
"""Version of the cache layout (2: content-keyed records, per-writer shards); another is rejected."""
STALE_TMP_SECONDS = 600
"""Temporary files older than this are left by a killed write and removed when the cache is opened."""
_SHARD_NAME = re.compile(r"^(parts/[A-Za-z0-9_-]+/)?shard-[0-9a-f]{8,64}\.safetensors$")
PARTS = "parts"
"""Sub-folder of a cache that holds the parts of a distributed extraction (one per rank)."""

PARTS = "parts"
"""Sub-folder of a cache that holds the parts of a distributed extraction (one per rank)."""

_ARRAYS = tuple(f.name for f in fields(ExampleRecord) if f.name not in ("id", "answer_len", "prompt_len"))
_OPTIONAL = ("grounding", "contrast")
"""Arrays that shards written before they existed lack (the record keeps its empty default)."""


class CacheRepairWarning(UserWarning):
    """A damaged, missing or foreign shard was dropped from a cache; its records are computed again."""


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _valid_entry(shard: Any) -> bool:
    """An index entry naming a shard file inside the folder, with one key per id."""
    if not isinstance(shard, dict) or not isinstance(shard.get("file"), str):
        return False
    ids, keys = shard.get("ids"), shard.get("keys")
    named = _SHARD_NAME.match(shard["file"]) is not None
    return named and isinstance(ids, list) and isinstance(keys, list) and len(ids) == len(keys)


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


class FeatureCache:
    """Shards of example records under one folder, keyed by content and settings.

    Args:
        root: The cache folder (created when missing).
        settings: What the records depend on (proxy, layers, hidden layers, TOHA, chat template, ...);
            part of every record's key, so records made with other settings are never returned.
    """

    def __init__(self, root: str | Path, settings: dict[str, Any]):
        self.root = Path(root)
        self.settings = json.loads(json.dumps(settings))
        self._settings_digest = _digest(self.settings)
        self._index_path = self.root / "index.json"
        if self.root.exists() and not self.root.is_dir():
            raise NotADirectoryError(f"cache folder {self.root} is a file")
        self._shards: list[dict[str, Any]] = self._read_index()
        if self.root.is_dir() and os.access(self.root, os.W_OK):
            self._remove_stale_tmp()

    def key(self, example: Any) -> str:
        """The record key of ``example``: SHA-256 of the settings and its id, context, question, answer."""
        fields_ = [example.id, example.context, example.question, example.answer]
        return _digest([self._settings_digest, fields_])

    def _id_key(self, rid: str) -> str:
        """Key of a record added without an example (content unknown): settings and id only."""
        return _digest([self._settings_digest, "id-only", rid])

    @property
    def ids(self) -> set[str]:
        """Ids of the records in the cache (any settings or content)."""
        return {i for s in self._shards for i in s["ids"]}

    @property
    def keys(self) -> set[str]:
        """Keys of the records in the cache."""
        return {k for s in self._shards for k in s["keys"]}

    def __len__(self) -> int:
        return sum(len(s["ids"]) for s in self._shards)

    def _read_index(self) -> list[dict[str, Any]]:
        if not self._index_path.exists():
            return []
        try:
            index = json.loads(self._index_path.read_bytes())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(
                f"cache index {self._index_path} is not valid JSON ({exc}); delete the folder"
            ) from None
        if not isinstance(index, dict) or index.get("format") != CACHE_FORMAT:
            got = index.get("format") if isinstance(index, dict) else None
            raise ValueError(
                f"cache {self.root} has format {got!r}; this halluprobe reads format "
                f"{CACHE_FORMAT}. Delete the folder or choose another --out."
            )
        shards: list[dict[str, Any]] = []
        foreign: list[Any] = []
        for shard in index.get("shards", []):
            (shards if _valid_entry(shard) else foreign).append(shard)
        if foreign:
            warnings.warn(
                f"cache {self.root}: ignored {len(foreign)} index entries that do not name a shard file "
                "inside the folder",
                CacheRepairWarning,
                stacklevel=3,
            )
        return shards

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the folder's lock and re-read the index (other writers may have added shards)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                self._shards = self._read_index()
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _publish(self, shards: list[dict[str, Any]]) -> None:
        index = {"format": CACHE_FORMAT, "shards": shards}
        atomic_write_bytes(self._index_path, json.dumps(index, indent=1).encode())
        self._shards = shards

    def _remove_stale_tmp(self) -> None:
        now = time.time()
        for tmp in self.root.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                if tmp.is_file() and not tmp.is_symlink() and now - tmp.stat().st_mtime > STALE_TMP_SECONDS:
                    tmp.unlink()

    def add(self, records: list[ExampleRecord], keys: list[str] | None = None) -> None:
        """Write ``records`` as one new shard and publish it in the index (both atomically, under the lock).

        Records whose keys another writer published meanwhile (two extractions of the same examples into
        one folder) are left out, so every key is cached once.

        Args:
            records: The records.
            keys: Their keys (`key` of each example); None keys them by settings and id only.
        """
        if not records:
            return
        keys = list(keys) if keys is not None else [self._id_key(r.id) for r in records]
        if len(keys) != len(records):
            raise ValueError(f"add got {len(records)} records and {len(keys)} keys")
        known = self.keys
        dup = [r.id for r, k in zip(records, keys, strict=True) if k in known]
        if dup:
            raise ValueError(f"records already cached: {dup[:5]}")
        with self._locked():  # another writer may have published some of these keys since we looked
            known = self.keys
            fresh = [(r, k) for r, k in zip(records, keys, strict=True) if k not in known]
            if fresh:
                self._publish(
                    [*self._shards, self._write_shard([r for r, _ in fresh], [k for _, k in fresh])]
                )

    def _write_shard(self, records: list[ExampleRecord], keys: list[str]) -> dict[str, Any]:
        """Write ``records`` to a new shard file (atomically); returns its index entry."""
        name = f"shard-{secrets.token_hex(8)}.safetensors"
        tensors: dict[str, np.ndarray] = {}
        for i, r in enumerate(records):
            for key in _ARRAYS:
                tensors[f"{i}.{key}"] = np.ascontiguousarray(getattr(r, key), dtype=np.float32)
        meta = {"records": json.dumps([[r.id, r.answer_len, r.prompt_len] for r in records])}
        with atomic_path(self.root / name) as tmp:
            save_file(tensors, str(tmp), metadata=meta)
            digest = sha256_file(tmp)
        return {"file": name, "ids": [r.id for r in records], "keys": keys, "sha256": digest}

    def refresh(self) -> None:
        """Re-read the index (after another process, e.g. rank 0 of a distributed run, changed it)."""
        self._shards = self._read_index()

    def part(self, name: str) -> FeatureCache:
        """A cache of the same settings in ``parts/<name>/``, filled by one writer on its own.

        Each rank of a distributed extraction writes its own part;
        [`merge_parts`][halluprobe.FeatureCache.merge_parts] then lists the parts' shards in this
        cache's index. Readers of this cache see a part's records only after the merge.
        """
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name or ""):
            raise ValueError(f"a cache part needs a plain folder name, got {name!r}")
        return FeatureCache(self.root / PARTS / name, self.settings)

    def merge_parts(self) -> int:
        """List every part's shards not yet listed here in this index (under the lock); returns their count.

        Parts are merged in name order and shards in their order, so the index is the same whichever
        process wrote a part first.

        Raises:
            ValueError: a part's shard repeats records (keys) already cached.
        """
        parts = sorted((self.root / PARTS).glob("*/index.json")) if (self.root / PARTS).is_dir() else []
        if not parts:
            return 0
        with self._locked():
            listed = {s["file"] for s in self._shards}
            known = self.keys
            added = []
            for index_path in parts:
                prefix = index_path.parent.relative_to(self.root).as_posix()
                for shard in FeatureCache(index_path.parent, self.settings)._shards:
                    file = f"{prefix}/{shard['file']}"
                    if file in listed:
                        continue
                    if known & set(shard["keys"]):
                        raise ValueError(
                            f"cache part shard {file} repeats ids already cached (same content and "
                            "settings); delete the cache"
                        )
                    added.append({**shard, "file": file})
                    known |= set(shard["keys"])
            if added:
                self._publish([*self._shards, *added])
        return len(added)

    def lookup(self, keys: list[str]) -> dict[str, ExampleRecord]:
        """The cached records of ``keys`` (those found); damaged shards are dropped, never fatal."""
        want = set(keys)
        found: dict[str, ExampleRecord] = {}
        damaged = []
        for shard in self._shards:
            if not want & set(shard["keys"]):
                continue
            records = self._read_checked(shard)
            if records is None:
                damaged.append(shard["file"])
                continue
            found.update({k: r for k, r in zip(shard["keys"], records, strict=True) if k in want})
        if damaged:
            self._drop(damaged)
        return found

    def _read_checked(self, shard: dict[str, Any]) -> list[ExampleRecord] | None:
        path = self.root / shard["file"]
        try:
            if path.is_symlink() or not path.is_file() or sha256_file(path) != shard.get("sha256"):
                return None
            records = _read_shard(path)
        except (OSError, ValueError, KeyError):
            return None
        return records if [r.id for r in records] == shard["ids"] else None

    def _drop(self, files: list[str]) -> None:
        warnings.warn(
            f"cache {self.root}: dropped {len(files)} missing or damaged shard(s) ({', '.join(files[:3])}); "
            "their records are computed again",
            CacheRepairWarning,
            stacklevel=3,
        )
        if not os.access(self.root, os.W_OK):
            self._shards = [s for s in self._shards if s["file"] not in files]
            return
        with self._locked():
            self._publish([s for s in self._shards if s["file"] not in files])
        for name in files:
            with contextlib.suppress(OSError):
                (self.root / name).unlink()

    def load(self, ids: list[str] | None = None) -> list[ExampleRecord]:
        """Read records back by id, in the order of ``ids`` (default: every record in shard order).

        An id cached more than once (other content or settings) gives its most recent record; use
        `lookup` with `key` to get the record of one exact example.

        Raises:
            KeyError: An id in ``ids`` is not cached (or only in a damaged shard).
        """
        by_id = {i: k for s in self._shards for i, k in zip(s["ids"], s["keys"], strict=True)}
        order = ids if ids is not None else list(by_id)
        found = self.lookup([by_id[i] for i in order if i in by_id])
        out = {i: found[by_id[i]] for i in order if i in by_id and by_id[i] in found}
        missing = [i for i in order if i not in out]
        if missing:
            raise KeyError(f"not in cache {self.root}: {missing[:5]}")
        return [out[i] for i in order]


def _read_shard(path: Path) -> list[ExampleRecord]:
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
    tensors = load_file(str(path))
    out = []
    for i, (rid, answer_len, prompt_len) in enumerate(json.loads(meta["records"])):
        arrays = {
            key: tensors[f"{i}.{key}"] for key in _ARRAYS if key not in _OPTIONAL or f"{i}.{key}" in tensors
        }
        out.append(ExampleRecord(id=rid, answer_len=answer_len, prompt_len=prompt_len, **arrays))
    return out
