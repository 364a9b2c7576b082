"""Extraction phase: halluprobe records (resumable cache) plus per-token data for localisation.

halluprobe's :class:`~halluprobe.ProxyExtractor` keeps only pooled statistics; localisation needs every
answer token's statistics and its character offsets in the answer. :class:`TokenExtractor` runs the same
recorded forward once, reduces it with :func:`halluprobe.reduce_forward` for the cache, and additionally
writes one ``.npz`` per example under ``tokens/`` (head-mean per-token statistics of every layer, logit
statistics, character offsets; `halluprobe.localisation`). TOHA's MTopDiv comes from
`halluprobe.toha.dense_mtopdiv` (batched over heads on the device).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from halubench_data.files import atomic_path


def token_file(root: Path, example_id: str) -> Path:
    """Where the per-token data of one example lives."""
    return Path(root) / (hashlib.sha1(example_id.encode()).hexdigest()[:20] + ".npz")


def _atomic_npz(path: Path, **arrays) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


@dataclass
class TokenExtractor:
    """``compute`` function for :func:`halluprobe.extract_records` that also stores per-token data.

    Args:
        ext: A :class:`halluprobe.ProxyExtractor` (model, tokenizer, layers, hidden layers).
        token_dir: Folder of per-example ``.npz`` files (``None``: keep none).
        toha: Compute TOHA's MTopDiv of every head (dense response block, batched MST on the device).
        backend: Kernel backend for ``record_forward`` (``"auto"``, ``"triton"``, ``"torch"``); if the first
            forward fails on ``"auto"``/``"triton"``, the extractor falls back to ``"torch"`` and says so.
    """

    ext: Any
    token_dir: Path | None = None
    toha: bool = False
    backend: str = "auto"
    log: list[str] = field(default_factory=list)
    seconds: float = 0.0
    count: int = 0

    def _forward(self, encoded):
        """The package's recorded forward; a kernel failure on auto/triton falls back to torch, said aloud."""
        self.ext.backend = self.backend
        try:
            return self.ext.forward(encoded)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - a kernel failure must not lose the whole run
            if self.backend == "torch":
                raise
            self.log.append(f"record_forward backend={self.backend} failed ({exc!r}); falling back to torch")
            print(self.log[-1], flush=True)
            self.backend = self.ext.backend = "torch"
            return self.ext.forward(encoded)

    def __call__(self, batch: list[Any]):
        """Records of ``batch``; a batch that runs out of device memory is redone one example at a time."""
        if len(batch) > 1:
            try:
                return self._run(batch)
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                self.log.append(f"out of memory on a batch of {len(batch)}; redone one by one")
                print(self.log[-1], flush=True)
                return [r for ex in batch for r in self._run([ex])]
        return self._run(batch)

    def _run(self, batch: list[Any]):
        from halluprobe import reduce_forward
        from halluprobe.localisation import token_features, token_offsets
        from halluprobe.toha import dense_mtopdiv

        t0 = time.perf_counter()
        encoded = [self.ext.encode(ex) for ex in batch]
        fs = self._forward(encoded)
        mtop = dense_mtopdiv(self.ext.model, encoded, fs.layers) if self.toha else None
        records = reduce_forward(fs, [ex.id for ex in batch], mtopdiv=mtop)
        if self.token_dir is not None:
            for b, (ex, (ids, start)) in enumerate(zip(batch, encoded, strict=True)):
                length = int(fs.answer_len[b])
                _atomic_npz(
                    token_file(self.token_dir, ex.id),
                    feats=token_features(fs, b, length).astype(np.float16),
                    offsets=token_offsets(self.ext.tokenizer, ex.answer, ids[start:]),
                )
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.seconds += time.perf_counter() - t0
        self.count += len(batch)
        return records
