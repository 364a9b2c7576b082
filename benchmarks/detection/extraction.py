"""Extraction phase helper: halluprobe's extractor with timing, OOM splitting and a loud kernel fallback.

Records, TOHA's MTopDiv and the per-token data of the localisation all come from one
:class:`halluprobe.ProxyExtractor` call per batch (its ``toha`` and ``token_store`` are set per dataset).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class TimedExtractor:
    """``compute`` function for :func:`halluprobe.extract_records` around a ``ProxyExtractor``.

    A batch that runs out of device memory is redone one example at a time; if a forward fails on the
    ``"auto"``/``"triton"`` kernels, the extractor switches to ``"torch"`` and says so in ``log``.
    """

    ext: Any
    log: list[str] = field(default_factory=list)
    seconds: float = 0.0
    count: int = 0

    def __call__(self, batch: list[Any]):
        """Records of ``batch``, in order."""
        if len(batch) > 1:
            try:
                return self._run(batch)
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                self._say(f"out of memory on a batch of {len(batch)}; redone one by one")
                return [r for ex in batch for r in self._run([ex])]
        return self._run(batch)

    def _say(self, msg: str) -> None:
        self.log.append(msg)
        print(msg, flush=True)

    def _run(self, batch: list[Any]):
        t0 = time.perf_counter()
        try:
            records = self.ext(batch)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - a kernel failure must not lose the whole run
            if self.ext.backend == "torch":
                raise
            self._say(f"record_forward backend={self.ext.backend} failed ({exc!r}); falling back to torch")
            self.ext.backend = "torch"
            records = self.ext(batch)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.seconds += time.perf_counter() - t0
        self.count += len(batch)
        return records
