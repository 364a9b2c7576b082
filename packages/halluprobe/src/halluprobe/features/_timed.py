"""`TimedCompute`: the ``compute`` of `halluprobe.extract_records` for long unattended runs.

It wraps a `halluprobe.ProxyExtractor`: a batch that runs out of device memory is redone one example
at a time, a kernel failure on the ``"auto"`` or ``"triton"`` backend switches the extractor to
``"torch"`` and says so (in `TimedCompute.log` and on stdout: never a silent fallback), the compute
time is summed, and past an optional deadline every further batch raises `DeadlineReached`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DeadlineReached", "TimedCompute"]


class DeadlineReached(RuntimeError):
    """The run's deadline passed: the extraction stops, what is cached stays."""


@dataclass
class TimedCompute:
    """``compute(batch) -> records`` around ``ext``, with memory splitting, a loud fallback, timing."""

    ext: Any
    """The `halluprobe.ProxyExtractor` (its ``backend`` may be switched to ``"torch"``)."""
    deadline: float | None = None
    """Unix time after which a batch raises `DeadlineReached` (None: never)."""
    log: list[str] = field(default_factory=list)
    """What happened besides plain batches (memory splits, backend fallbacks)."""
    seconds: float = 0.0
    """Compute time summed over the batches (device synchronised)."""
    count: int = 0
    """Examples computed."""

    def __call__(self, batch: list[Any]) -> list[Any]:
        """Records of ``batch``, in order."""
        import torch

        if self.deadline is not None and time.time() > self.deadline:
            raise DeadlineReached(f"deadline passed before a batch of {len(batch)}")
        if len(batch) > 1:
            try:
                return self._run(batch)
            except torch.OutOfMemoryError:
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                self._say(f"out of memory on a batch of {len(batch)}; redone one by one")
                return [r for ex in batch for r in self._run([ex])]
        return self._run(batch)

    def _say(self, msg: str) -> None:
        self.log.append(msg)
        print(msg, flush=True)

    def _run(self, batch: list[Any]) -> list[Any]:
        import torch

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
