from collections import defaultdict

import numpy as np
import pytest
from halubench_data import (
    assign_splits,
    auroc,
    balance_lengths,
    filings_linked,
    link_groups,
    long_numbers,
    ngram_share,
    word_jaccard,
)
from hypothesis import given, settings, strategies as st

VOCAB = [f"w{i}" for i in range(400)]


@st.composite
def grouped_examples(draw):
    n_groups = draw(st.integers(60, 200))
    sizes = draw(st.lists(st.integers(1, 4), min_size=n_groups, max_size=n_groups))
    groups, strata = [], []
    for g, size in enumerate(sizes):
        source = draw(st.sampled_from(["A", "B"]))
        for _ in range(size):
            groups.append(f"g{g}")
            strata.append((source, draw(st.integers(0, 1))))
    return groups, strata


@settings(max_examples=40, deadline=None)
@given(grouped_examples(), st.integers(0, 10_000))
def test_assign_splits_keeps_groups_whole_and_approaches_70_15_15(data, seed):
    groups, strata = data
    split_of = assign_splits(groups, strata, seed=seed)
    assert set(split_of) == set(groups)  # one split per group: no group can cross splits
    assert assign_splits(groups, strata, seed=seed) == split_of  # deterministic for a seed
    counts = defaultdict(lambda: defaultdict(int))
    for g, s in zip(groups, strata, strict=True):
        counts[s][split_of[g]] += 1
    for s, per_split in counts.items():
        total = sum(per_split.values())
        if total < 40:
            continue
        for split, target in (("train", 0.7), ("validation", 0.15), ("test", 0.15)):
            # a greedy assignment of groups of <= 4 examples lands within a few groups of the target
            assert abs(per_split[split] / total - target) <= 0.05 + 12 / total, (s, split, dict(per_split))


def test_assign_splits_rejects_bad_fractions():
    with pytest.raises(ValueError, match="fractions"):
        assign_splits(["a"], fractions=(0.5, 0.5, 0.0))


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 36), st.integers(0, 1000))
def test_ngram_rule_on_constructed_near_duplicates(m, seed):
    rng = np.random.default_rng(seed)
    words = rng.choice(VOCAB, 80, replace=False)
    a = " ".join(words[:40])  # 40 distinct words: 36 five-grams
    b = " ".join([*words[:m], *words[40:80]])  # shares a prefix of m words with a, then new words
    expected = max(m - 4, 0) / 36
    assert ngram_share(a, b) == pytest.approx(expected)
    linked = link_groups([a, b])
    assert (linked[0] == linked[1]) == (expected >= 0.3)


def test_ngram_share_uses_the_shorter_text():
    long_text = " ".join(VOCAB[:100])
    short = " ".join(VOCAB[10:20])  # all of its 5-grams occur in the long text
    assert ngram_share(short, long_text) == 1.0 == ngram_share(long_text, short)
    assert ngram_share("a b c", "a b c") == 0.0  # fewer than 5 words: no 5-grams


def test_link_groups_is_transitive_and_stays_within_sources():
    a = " ".join(VOCAB[0:40])
    b = " ".join(VOCAB[20:60])  # overlaps a (and c) by half
    c = " ".join(VOCAB[40:80])  # does not overlap a
    d = " ".join(VOCAB[200:240])
    assert link_groups([a, b, c, d]) == ["grp-0", "grp-0", "grp-0", "grp-1"]
    assert len(set(link_groups([a, a], sources=["s1", "s2"]))) == 2


def test_long_numbers_ignore_years_and_short_numbers():
    text = "In 2019 revenue was 1,234,567 and costs 45,210; 2021 saw 987 units and 12345 returns, not 1899."
    assert long_numbers(text) == {"1234567", "45210", "12345", "1899"}


@pytest.mark.parametrize("shared", [5, 6, 9])
def test_filings_rule_shares_numbers(shared):
    nums = [str(10_000 + 137 * i) for i in range(12)]
    years = " ".join(str(y) for y in range(2000, 2012))
    a = "alpha " * 3 + " ".join(nums[:shared]) + " " + years + " " + " ".join(VOCAB[:50])
    b = "beta " * 3 + " ".join(nums[:shared]) + " " + years + " " + " ".join(VOCAB[300:350])
    assert word_jaccard(a, b) < 0.6
    assert filings_linked(a, b) == (shared >= 6)


def test_filings_rule_jaccard():
    a = " ".join(VOCAB[:100])
    b = " ".join(VOCAB[20:120])  # jaccard 80/120
    c = " ".join(VOCAB[40:140])  # jaccard 60/140 with a
    assert word_jaccard(a, b) == pytest.approx(80 / 120) and filings_linked(a, b)
    assert not filings_linked(a, c)
    groups = link_groups(
        [a, c], sources=["FinanceBench"] * 2, min_share=1.1, extra_rules={"FinanceBench": filings_linked}
    )
    assert groups[0] != groups[1]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000))
def test_length_balancing_gives_length_auroc_one_half(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, 400)
    lengths = rng.poisson(3 + 6 * labels)  # hallucinated answers are longer
    assert auroc(lengths, labels) > 0.8
    keep = balance_lengths(lengths, labels, seed=seed)
    assert auroc(lengths[keep], labels[keep]) == pytest.approx(0.5, abs=1e-12)  # sklearn sums trapezoids
    for length in np.unique(lengths[keep]):
        sel = lengths[keep] == length
        assert labels[keep][sel].sum() * 2 == sel.sum()
    assert np.array_equal(balance_lengths(lengths, labels, seed=seed), keep)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([0.1, 0.3, 0.5]))
def test_link_groups_equals_brute_force_components(seed, min_share):
    rng = np.random.default_rng(seed)
    small_vocab = VOCAB[:12]  # few words: many shared 5-grams, boilerplate-like
    texts = [" ".join(rng.choice(small_vocab, int(rng.integers(3, 30)))) for _ in range(25)]
    sources = [str(s) for s in rng.integers(0, 2, 25)]
    groups = link_groups(texts, sources, min_share=min_share)
    # brute force: union every same-source pair whose share reaches min_share, then components
    label = list(range(25))

    def find(i):
        while label[i] != i:
            i = label[i]
        return i

    for i in range(25):
        for j in range(i + 1, 25):
            same = texts[i] == texts[j] or ngram_share(texts[i], texts[j]) >= min_share
            if sources[i] == sources[j] and same:
                label[find(i)] = find(j)
    for i in range(25):
        for j in range(25):
            assert (groups[i] == groups[j]) == (find(i) == find(j))
