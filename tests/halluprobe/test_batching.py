"""Length bucketing of the extraction: windows, token budgets, long examples alone."""

from __future__ import annotations

import random

import pytest
from halluprobe.features import plan_batches


@pytest.mark.parametrize("window", [None, 1, 7, 50])
@pytest.mark.parametrize(("batch_size", "budget"), [(1, None), (4, None), (64, 300), (3, 100)])
def test_plan_covers_everything_within_budget_and_windows(window, batch_size, budget):
    rng = random.Random(batch_size * 31 + (window or 0))
    lengths = [rng.choice([1, 5, 40, 90, 250, 1000]) for _ in range(113)]
    plan = plan_batches(lengths, batch_size=batch_size, token_budget=budget, window=window)
    assert sorted(i for b in plan for i in b) == list(range(len(lengths)))
    for batch in plan:
        assert 1 <= len(batch) <= batch_size
        if budget is not None and len(batch) > 1:
            assert sum(lengths[i] for i in batch) <= budget
        step = window or len(lengths)
        assert len({i // step for i in batch}) == 1  # never across windows
    flat = [i for b in plan for i in b]
    for lo in range(0, len(lengths), window or len(lengths)):
        inside = [i for i in flat if lo <= i < lo + (window or len(lengths))]
        assert [lengths[i] for i in inside] == sorted(lengths[i] for i in inside)
    assert plan == plan_batches(lengths, batch_size=batch_size, token_budget=budget, window=window)


def test_a_long_example_runs_alone_and_budget_fills_batches():
    plan = plan_batches([10, 10, 5000, 10, 10, 10], batch_size=8, token_budget=30)
    assert plan == [[0, 1, 3], [4, 5], [2]]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"batch_size": 0}, "batch_size"), ({"batch_size": 2, "token_budget": 0}, "token_budget"),
     ({"batch_size": 2, "window": 0}, "window")],
)  # fmt: skip
def test_plan_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        plan_batches([1, 2, 3], **kwargs)
