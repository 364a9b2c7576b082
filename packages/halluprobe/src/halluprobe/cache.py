"""A resumable cache of [`ExampleRecord`][halluprobe.ExampleRecord] shards (safetensors + JSON index).

Layout of a cache folder:

```text
index.json            # format version, the extraction settings, and the list of shards
shard-00000.safetensors
shard-00001.safetensors
...
parts/rank-00000/         # a distributed extraction: one part per rank (its own index and shards),
parts/rank-00001/         # listed in index.json by rank 0 when the ranks are done
```

Every file is written to a temporary name in the same folder and renamed into place, so a run killed
at any moment leaves either the old or the new version of each file. A shard becomes part of the
cache only when the index that lists it has been renamed into place; a shard written just before an
interruption is simply rewritten by the next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file, save_file

from halluprobe.records import ExampleRecord

CACHE_FORMAT = 1
"""Version of the cache layout; a cache of another version is rejected."""

PARTS = "parts"
"""Sub-folder of a cache that holds the parts of a distributed extraction (one per rank)."""

_ARRAYS = tuple(f.name for f in fields(ExampleRecord) if f.name not in ("id", "answer_len", "prompt_len"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class FeatureCache:
    """Shards of example records under one folder, keyed by example id.

    Args:
        root: The cache folder (created when missing).
        settings: What the records depend on (proxy, layers, hidden layers, TOHA, ...). A cache made
            with other settings is rejected rather than silently mixed.
    """

    def __init__(self, root: str | Path, settings: dict[str, Any]):
        self.root = Path(root)
        self.settings = json.loads(json.dumps(settings))
        self._index_path = self.root / "index.json"
        self._shards: list[dict[str, Any]] = self._read_index()

    def _read_index(self) -> list[dict[str, Any]]:
        """The shards listed in ``index.json`` (none when it does not exist), after checking it."""
        if not self._index_path.exists():
            return []
        index = json.loads(self._index_path.read_text())
        if index.get("format") != CACHE_FORMAT:
            raise ValueError(
                f"cache {self.root} has format {index.get('format')!r}; this halluprobe reads format "
                f"{CACHE_FORMAT}. Delete the folder or choose another --out."
            )
        if index.get("settings") != self.settings:
            raise ValueError(
                f"cache {self.root} was made with settings {index.get('settings')}, not {self.settings}; "
                "delete it or choose another folder"
            )
        return index["shards"]

    def refresh(self) -> None:
        """Re-read the index (after another process, e.g. rank 0 of a distributed run, changed it)."""
        self._shards = self._read_index()

    def part(self, name: str) -> FeatureCache:
        """A cache of the same settings in ``parts/<name>/``, filled by one writer on its own.

        Each rank of a distributed extraction writes its own part;
        [`merge_parts`][halluprobe.FeatureCache.merge_parts] then lists the parts' shards in this
        cache's index. Readers of this cache see a part's records only after the merge.
        """
        if not name or name.startswith(".") or "/" in name or "\\" in name:
            raise ValueError(f"a cache part needs a plain folder name, got {name!r}")
        return FeatureCache(self.root / PARTS / name, self.settings)

    def merge_parts(self) -> int:
        """List every part's shards not yet listed here in this index (one atomic write); returns their count.

        Parts are merged in name order and shards in their order, so the index is the same whichever
        process wrote a part first. Only one process may merge at a time (rank 0, while the others wait).

        Raises:
            ValueError: a part was made with other settings, or a part's shard repeats a cached id.
        """
        listed = {s["file"] for s in self._shards}
        known = self.ids
        added: list[dict[str, Any]] = []
        for index_path in sorted((self.root / PARTS).glob("*/index.json")):
            prefix = index_path.parent.relative_to(self.root).as_posix()
            for shard in FeatureCache(index_path.parent, self.settings)._shards:
                file = f"{prefix}/{shard['file']}"
                if file in listed:
                    continue
                if known & set(shard["ids"]):
                    raise ValueError(f"cache part shard {file} repeats ids already cached; delete the cache")
                added.append({**shard, "file": file})
                known |= set(shard["ids"])
        if added:
            shards = [*self._shards, *added]
            index = {"format": CACHE_FORMAT, "settings": self.settings, "shards": shards}
            atomic_write_bytes(self._index_path, json.dumps(index, indent=1).encode())
            self._shards = shards
        return len(added)

    @property
    def ids(self) -> set[str]:
        """Ids of the examples already in the cache."""
        return {i for s in self._shards for i in s["ids"]}

    def __len__(self) -> int:
        return sum(len(s["ids"]) for s in self._shards)

    def add(self, records: list[ExampleRecord]) -> None:
        """Write ``records`` as one new shard and publish it in the index (both atomically)."""
        if not records:
            return
        known = self.ids
        dup = [r.id for r in records if r.id in known]
        if dup:
            raise ValueError(f"records already cached: {dup[:5]}")
        name = f"shard-{len(self._shards):05d}.safetensors"
        tensors: dict[str, np.ndarray] = {}
        for i, r in enumerate(records):
            for key in _ARRAYS:
                tensors[f"{i}.{key}"] = np.ascontiguousarray(getattr(r, key), dtype=np.float32)
        meta = {"records": json.dumps([[r.id, r.answer_len, r.prompt_len] for r in records])}
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{name}.", suffix=".tmp")
        os.close(fd)
        try:
            save_file(tensors, tmp, metadata=meta)
            digest = sha256_file(Path(tmp))
            os.replace(tmp, self.root / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        shards = [*self._shards, {"file": name, "ids": [r.id for r in records], "sha256": digest}]
        index = {"format": CACHE_FORMAT, "settings": self.settings, "shards": shards}
        atomic_write_bytes(self._index_path, json.dumps(index, indent=1).encode())
        self._shards = shards

    def load(self, ids: list[str] | None = None) -> list[ExampleRecord]:
        """Read records back, in the order of ``ids`` (default: every cached record in shard order).

        Raises:
            KeyError: An id in ``ids`` is not cached.
            ValueError: A shard's bytes do not match the hash in the index.
        """
        found: dict[str, ExampleRecord] = {}
        for shard in self._shards:
            if ids is not None and not set(shard["ids"]) & set(ids):
                continue
            path = self.root / shard["file"]
            if sha256_file(path) != shard["sha256"]:
                raise ValueError(
                    f"cache shard {path} does not match its hash in index.json; delete the cache"
                )
            found.update(_read_shard(path))
        order = ids if ids is not None else [i for s in self._shards for i in s["ids"]]
        missing = [i for i in order if i not in found]
        if missing:
            raise KeyError(f"not in cache {self.root}: {missing[:5]}")
        return [found[i] for i in order]


def _read_shard(path: Path) -> dict[str, ExampleRecord]:
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
    tensors = load_file(str(path))
    out = {}
    for i, (rid, answer_len, prompt_len) in enumerate(json.loads(meta["records"])):
        arrays = {key: tensors[f"{i}.{key}"] for key in _ARRAYS}
        out[rid] = ExampleRecord(id=rid, answer_len=answer_len, prompt_len=prompt_len, **arrays)
    return out
