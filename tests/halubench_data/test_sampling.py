"""Seeded samples of a dataset (halubench_data.sampling)."""

import pytest
from halubench_data import Dataset, Example, sampling as S


def _ds(n_per_split=12):
    exs = []
    for split in ("train", "validation", "test"):
        for i in range(n_per_split):
            label, answer = int(i % 3 == 0), "a" * (n_per_split - i)
            exs.append(
                Example(f"{split}{i}", "s", "c" * (i + 1), "q", answer, label, f"{split}g{i // 2}", split)
            )
    return Dataset(tuple(exs), "toy")


def test_uniform_samples_keep_order_name_and_seed():
    ds = _ds()
    got = S.uniform(ds, 7, seed=1)
    assert len(got) == 7 and got.name == "toy" and got == S.uniform(ds, 7, seed=1)
    order = [e.id for e in ds]
    assert [order.index(e.id) for e in got] == sorted(order.index(e.id) for e in got)
    assert S.uniform(ds, 7, seed=2) != got and len(S.uniform(ds, 999)) == len(ds)
    per = S.uniform_per_split(ds, 5)
    assert [len(per.split(s)) for s in ("train", "validation", "test")] == [5, 5, 5]


def test_balanced_and_first_per_label_take_half_of_each_label_where_they_can():
    ds = _ds()  # 12 hallucinated, 24 supported
    b = S.balanced(ds, 9)
    assert sum(e.label for e in b) == 5 and len(b) == 9
    assert sum(e.label for e in S.balanced(ds, 40)) == 12  # fewer hallucinated than asked: all of them
    f = S.first_per_label(ds, 5)
    assert [e.id for e in f] == ["train0", "train3", "train6", "train1", "train2"]


def test_shortest_per_split_prefers_short_examples_of_distinct_groups():
    ds = _ds()
    got = S.shortest_per_split(ds, 4)
    assert got.split("train").examples[0].id == "train0"
    for split in ("train", "validation", "test"):
        part = got.split(split).examples
        assert len(part) == 4 and sum(e.label for e in part) == 2
        for label in (0, 1):  # distinct groups first, within each label
            assert len({e.group for e in part if e.label == label}) == 2
    with pytest.raises(ValueError, match="limit must be an integer >= 1"):
        S.shortest_per_split(ds, 0)
