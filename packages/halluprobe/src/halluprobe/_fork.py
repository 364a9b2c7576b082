"""`fork_map`: one function over indices, in this process or in forked worker processes.

Fitted closures (scorers, fitters) do not pickle, so the work is handed to the workers by forking:
they inherit it from the parent's memory and return only plain results (arrays, dataclasses).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["check_jobs", "fork_map"]

_TASK: Callable[[int], Any] | None = None
"""The function of the running `fork_map`, set before the workers fork."""


def check_jobs(jobs: Any, n: int) -> int:
    """``jobs`` as a worker count for ``n`` tasks (at most ``n``), or ValueError naming what is expected."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    if jobs > 1 and "fork" not in multiprocessing.get_all_start_methods():
        raise ValueError(f"jobs={jobs} needs the 'fork' start method, which this platform lacks; pass jobs=1")
    return max(1, min(jobs, n))


def _run(i: int) -> Any:
    from threadpoolctl import threadpool_limits

    assert _TASK is not None
    with threadpool_limits(1):  # one BLAS thread per worker: the workers share the cores
        return _TASK(i)


def fork_map(fn: Callable[[int], T], n: int, jobs: int = 1) -> Iterator[T]:
    """``fn(0), ..., fn(n - 1)`` in order; with ``jobs > 1`` computed by that many forked workers.

    The results are the same for any ``jobs`` when ``fn`` is deterministic. Workers run with one BLAS
    thread each. Raises ValueError for a bad ``jobs`` (`check_jobs`).
    """
    global _TASK
    jobs = check_jobs(jobs, n)
    if jobs == 1:
        for i in range(n):
            yield fn(i)
        return
    from concurrent.futures import ProcessPoolExecutor

    _TASK = fn
    try:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            yield from pool.map(_run, range(n))
    finally:
        _TASK = None
