"""The server's batching queue on its own: a request it could never hold, and a request cancelled in time."""

from __future__ import annotations

import asyncio

import pytest
from halluprobe.serving import BatchQueue


def test_a_request_larger_than_the_queue_is_refused_not_retried_forever():
    async def run() -> None:
        queue: BatchQueue[int, int] = BatchQueue(lambda xs: xs, max_pending=4, max_batch=8)
        queue.start()
        with pytest.raises(ValueError, match="5 items; this queue holds at most 4"):
            await queue.submit(range(5))
        assert await queue.submit(range(4)) == [0, 1, 2, 3]
        await queue.close()

    asyncio.run(run())


def test_a_request_cancelled_before_its_forward_is_never_run():
    ran: list[list[int]] = []

    def run_batch(xs: list[int]) -> list[int]:
        ran.append(list(xs))
        return [x * 10 for x in xs]

    async def run() -> None:
        queue: BatchQueue[int, int] = BatchQueue(run_batch, max_wait=0.5, max_batch=8)
        queue.start()
        gone = asyncio.ensure_future(queue.submit([1, 2]))
        stays = asyncio.ensure_future(queue.submit([3]))
        await asyncio.sleep(0.05)  # both wait for more answers
        gone.cancel()
        assert await stays == [30]
        assert queue.pending == 0 and queue.dropped == 2
        only = asyncio.ensure_future(queue.submit([4]))
        await asyncio.sleep(0.05)
        only.cancel()  # the only request waiting leaves: the worker goes back to waiting
        await asyncio.sleep(0.6)
        assert await queue.submit([5]) == [50]
        await queue.close()

    asyncio.run(run())
    assert ran == [[3], [5]]
