"""A bounded queue that gathers the answers of concurrent requests into shared forwards.

Requests submit their items; one worker takes what has arrived, waits at most ``max_wait`` seconds
for more (until ``max_batch`` items), and runs them through one call of ``run`` on a worker thread.
The queue holds at most ``max_pending`` items (waiting or in a forward): beyond that `submit`
raises [`QueueFull`][halluprobe.serving.QueueFull] at once, so memory never grows without bound; a
request of more than ``max_pending`` items, which could never be queued, raises ValueError. A request
cancelled before its forward started (its client left) leaves the queue, and its items are not scored.
[`close`][halluprobe.serving.BatchQueue.close] refuses new items and returns once every item already
submitted has its result.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class QueueFull(RuntimeError):
    """The queue holds ``max_pending`` items; retry after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class QueueClosed(RuntimeError):
    """The queue is shutting down and takes no new items."""


@dataclass
class _Job(Generic[T, R]):
    items: list[T]
    future: asyncio.Future[list[R]]


class BatchQueue(Generic[T, R]):
    """Dynamic batching with a bound and a timeout.

    Args:
        run: Maps a list of items to their results, in order (called on ``executor``, one call at a
            time). An exception fails every request of that batch.
        max_wait: Seconds the worker waits after the first item for more (>= 0).
        max_batch: Most items per call of ``run`` (a larger request runs alone).
        max_pending: Most items waiting or in a call of ``run``.
        executor: Where ``run`` executes (None: the event loop's default executor).
    """

    def __init__(
        self,
        run: Callable[[list[T]], list[R]],
        *,
        max_wait: float = 0.01,
        max_batch: int = 32,
        max_pending: int = 256,
        executor: Executor | None = None,
    ) -> None:
        if max_wait < 0 or max_batch < 1 or max_pending < 1:
            raise ValueError(
                f"need max_wait >= 0, max_batch >= 1, max_pending >= 1; got {max_wait}, {max_batch}, "
                f"{max_pending}"
            )
        self.run, self.max_wait, self.max_batch, self.max_pending = run, max_wait, max_batch, max_pending
        self.executor = executor
        self.pending = 0
        """Items waiting or in a forward."""
        self.batches = 0
        """Calls of ``run`` so far."""
        self.dropped = 0
        """Items whose request was cancelled before their forward (never scored)."""
        self._jobs: deque[_Job[T, R]] = deque()
        self._wakeup = asyncio.Event()
        self._closing = False
        self._worker: asyncio.Task[None] | None = None
        self._seconds_per_batch = 0.0

    def start(self) -> None:
        """Start the worker on the running event loop."""
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._work())

    async def submit(self, items: Sequence[T]) -> list[R]:
        """The results of ``items`` (in order), once the forward that holds them has run.

        Cancelling the call before the forward that holds the items has started removes them.

        Raises:
            ValueError: more than ``max_pending`` items (they could never be queued).
            QueueFull: ``max_pending`` would be exceeded (nothing was queued).
            QueueClosed: the queue is shutting down.
        """
        if self._closing or self._worker is None:
            raise QueueClosed("the server is shutting down")
        items = list(items)
        if len(items) > self.max_pending:
            raise ValueError(f"{len(items)} items; this queue holds at most {self.max_pending}")
        if self.pending + len(items) > self.max_pending:
            raise QueueFull(
                f"the scoring queue is full ({self.pending} of {self.max_pending} answers pending); "
                "retry later",
                self._retry_after(),
            )
        job: _Job[T, R] = _Job(items, asyncio.get_running_loop().create_future())
        self.pending += len(items)
        self._jobs.append(job)
        self._wakeup.set()
        try:
            return await job.future
        except asyncio.CancelledError:
            if job in self._jobs:  # not taken into a forward yet: dropped unscored
                self._jobs.remove(job)
                self.pending -= len(items)
                self.dropped += len(items)
            raise

    def _retry_after(self) -> int:
        """Whole seconds until the queue has likely drained (at least 1)."""
        batches = math.ceil(self.pending / self.max_batch)
        return max(1, math.ceil(batches * (self._seconds_per_batch + self.max_wait)))

    def _queued(self) -> int:
        return sum(len(j.items) for j in self._jobs)

    async def _gather(self) -> list[_Job[T, R]]:
        """Wait for a job, then up to ``max_wait`` for more; take jobs up to ``max_batch`` items."""
        while True:
            while not self._jobs:
                if self._closing:
                    return []
                self._wakeup.clear()
                await self._wakeup.wait()
            deadline = time.monotonic() + self.max_wait
            while self._queued() < self.max_batch and not self._closing:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), left)
                except TimeoutError:
                    break
            if self._jobs:  # else every job waiting was cancelled meanwhile: wait again
                break
        taken = [self._jobs.popleft()]
        count = len(taken[0].items)
        while self._jobs and count + len(self._jobs[0].items) <= self.max_batch:
            job = self._jobs.popleft()
            taken.append(job)
            count += len(job.items)
        return taken

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            jobs = await self._gather()
            if not jobs:
                return
            items = [it for job in jobs for it in job.items]
            start = time.monotonic()
            try:
                results = await loop.run_in_executor(self.executor, self.run, items)
                if len(results) != len(items):
                    raise RuntimeError(f"run returned {len(results)} results for {len(items)} items")
            except Exception as exc:  # every request of the batch gets the error, the worker goes on
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(exc)
            else:
                at = 0
                for job in jobs:
                    if not job.future.done():  # a request whose client left is cancelled
                        job.future.set_result(results[at : at + len(job.items)])
                    at += len(job.items)
            finally:
                self.pending -= len(items)
                self.batches += 1
                took = time.monotonic() - start
                self._seconds_per_batch = (
                    took if self.batches == 1 else 0.8 * self._seconds_per_batch + 0.2 * took
                )

    async def close(self) -> None:
        """Refuse new items; return when every submitted item has its result."""
        self._closing = True
        self._wakeup.set()
        if self._worker is not None:
            await self._worker
