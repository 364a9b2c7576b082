"""General leakage filters: near-duplicate linking, groups, group splits, length balancing.

These implement the paper's Appendix K on any dataset:

* two contexts of one source are linked when at least 30% of the word 5-grams of the shorter one
  occur in the other (``ngram_share``);
* FinanceBench-style filings are also linked when their word sets have Jaccard similarity of at
  least 0.6, or they share at least six numbers of four or more digits that are not years
  (``filings_linked``);
* groups are the connected components of the links (``link_groups``, union-find);
* whole groups go to splits so that every (source, label) stratum approaches 70/15/15
  (``assign_splits``, seed 42);
* ``balance_lengths`` keeps equally many faithful and hallucinated answers at every answer length
  in words, so that length alone carries no signal.
"""

from __future__ import annotations

import math
import random
import re
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence

import numpy as np

from .schema import SPLITS, Split

_WORD = re.compile(r"\w+")
_NUMBER = re.compile(r"\d[\d,]*\d|\d")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (runs of letters, digits and underscores)."""
    return _WORD.findall(text.lower())


def word_ngrams(text: str, n: int = 5) -> set[tuple[str, ...]]:
    """The set of word ``n``-grams of ``text`` (empty when it has fewer than ``n`` words)."""
    w = words(text)
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def ngram_share(a: str, b: str, n: int = 5) -> float:
    """Share of the shorter text's word ``n``-grams that occur in the other (0 when it has none).

    "Shorter" means fewer words; on a tie ``a`` counts as the shorter.
    """
    short, long_ = (a, b) if len(words(a)) <= len(words(b)) else (b, a)
    gs = word_ngrams(short, n)
    if not gs:
        return 0.0
    return len(gs & word_ngrams(long_, n)) / len(gs)


def word_jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the word sets of ``a`` and ``b`` (0 when both are empty)."""
    sa, sb = set(words(a)), set(words(b))
    return len(sa & sb) / len(sa | sb) if sa | sb else 0.0


def long_numbers(text: str, min_digits: int = 4) -> set[str]:
    """Numbers with at least ``min_digits`` digits (thousands separators removed), years excluded.

    A year is a bare four-digit number from 1900 to 2099.
    """
    out = set()
    for tok in _NUMBER.findall(text):
        digits = tok.replace(",", "")
        if len(digits) < min_digits:
            continue
        if len(digits) == 4 and "," not in tok and 1900 <= int(digits) <= 2099:
            continue
        out.add(digits.lstrip("0") or "0")
    return out


def filings_linked(a: str, b: str, *, min_jaccard: float = 0.6, min_shared_numbers: int = 6) -> bool:
    """The FinanceBench rule: word-set Jaccard >= 0.6 or >= 6 shared long non-year numbers."""
    if word_jaccard(a, b) >= min_jaccard:
        return True
    return len(long_numbers(a) & long_numbers(b)) >= min_shared_numbers


class UnionFind:
    """Disjoint sets over ``0..n-1`` with path halving and union by size."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self.size = [1] * n

    def find(self, i: int) -> int:
        """Root of ``i``'s set."""
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        """Merge the sets of ``i`` and ``j``."""
        ri, rj = self.find(i), self.find(j)
        if ri == rj:
            return
        if self.size[ri] < self.size[rj]:
            ri, rj = rj, ri
        self.parent[rj] = ri
        self.size[ri] += self.size[rj]


def link_groups(
    texts: Sequence[str],
    sources: Sequence[str] | None = None,
    *,
    n: int = 5,
    min_share: float = 0.3,
    extra_rules: dict[str, Callable[[str, str], bool]] | None = None,
    prefix: str = "grp",
) -> list[str]:
    """Group ids: connected components of near-duplicate links within each source.

    Args:
        texts: one context per item (identical texts are always linked).
        sources: source name per item; links never cross sources. ``None``: one source.
        n: n-gram length of the overlap rule.
        min_share: minimum share of the shorter text's n-grams found in the other.
        extra_rules: per source, an additional pairwise rule (e.g. ``{"FinanceBench": filings_linked}``),
            tried on every pair of distinct texts of that source (quadratic; meant for small sources).
        prefix: prefix of the returned group ids.

    Returns:
        One group id per item, ``f"{prefix}-{k}"`` with ``k`` numbered by first appearance.
    """
    srcs = list(sources) if sources is not None else [""] * len(texts)
    if len(srcs) != len(texts):
        raise ValueError(f"sources must have {len(texts)} entries, got {len(srcs)}")
    uniq: dict[tuple[str, str], int] = {}
    item_key = [uniq.setdefault((s, t), len(uniq)) for s, t in zip(srcs, texts, strict=True)]
    keys = list(uniq)
    uf = UnionFind(len(keys))
    for i, j in _overlap_pairs(keys, n, min_share):
        uf.union(i, j)
    for source, rule in (extra_rules or {}).items():
        members = [k for k, (s, _) in enumerate(keys) if s == source]
        for x in range(len(members)):
            for y in range(x + 1, len(members)):
                i, j = members[x], members[y]
                if uf.find(i) != uf.find(j) and rule(keys[i][1], keys[j][1]):
                    uf.union(i, j)
    names: dict[int, str] = {}
    return [names.setdefault(uf.find(k), f"{prefix}-{len(names)}") for k in item_key]


def _overlap_pairs(keys: list[tuple[str, str]], n: int, min_share: float) -> list[tuple[int, int]]:
    """Pairs (same source) where >= ``min_share`` of the shorter text's n-grams occur in the other.

    Exact, with the prefix filter of set-similarity joins: if text ``i`` (the shorter) shares at
    least ``t = ceil(min_share * |G_i|)`` n-grams with ``j``, then ``j`` holds one of the
    ``|G_i| - t + 1`` rarest n-grams of ``i``. Only those postings are scanned, so boilerplate
    n-grams shared by thousands of texts do not make the search quadratic.
    """
    grams = [word_ngrams(t, n) for _, t in keys]
    size = [(len(words(t)), k) for k, (_, t) in enumerate(keys)]  # "shorter": fewer words, then index
    postings: dict[tuple[str, tuple[str, ...]], list[int]] = defaultdict(list)
    for k, (s, _) in enumerate(keys):
        for g in grams[k]:
            postings[(s, g)].append(k)
    pairs: list[tuple[int, int]] = []
    for i, (s, _) in enumerate(keys):
        if not grams[i]:
            continue
        need = max(1, math.ceil(min_share * len(grams[i]) - 1e-9))
        rare = sorted(grams[i], key=lambda g: (len(postings[(s, g)]), g))[: len(grams[i]) - need + 1]
        cands = {j for g in rare for j in postings[(s, g)] if size[j] > size[i]}
        pairs.extend((i, j) for j in cands if len(grams[i] & grams[j]) / len(grams[i]) >= min_share)
    return pairs


def assign_splits(
    groups: Sequence[str],
    strata: Sequence[Hashable] | None = None,
    *,
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
    seed: int = 42,
) -> dict[str, Split]:
    """Assign whole groups to train/validation/test, approaching ``fractions`` within every stratum.

    Groups are shuffled with ``seed``, then taken largest first; each goes to the split whose
    strata would be least filled relative to their targets after adding it (the sum over the
    group's strata of ``count * fill / target``). Pass ``strata=[(source, label), ...]`` for the
    paper's "within every source and label".

    Args:
        groups: group id per example.
        strata: stratum per example (``None``: one stratum).
        fractions: train, validation and test shares (positive, summing to 1).
        seed: seed of the shuffle.

    Returns:
        Split of every group.
    """
    if len(fractions) != 3 or min(fractions) <= 0 or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(f"fractions must be three positive shares summing to 1, got {fractions}")
    strata = list(strata) if strata is not None else [0] * len(groups)
    if len(strata) != len(groups):
        raise ValueError(f"strata must have {len(groups)} entries, got {len(strata)}")
    per_group: dict[str, dict[Hashable, int]] = defaultdict(lambda: defaultdict(int))
    total: dict[Hashable, int] = defaultdict(int)
    for g, s in zip(groups, strata, strict=True):
        per_group[g][s] += 1
        total[s] += 1
    order = sorted(per_group)
    random.Random(seed).shuffle(order)
    order.sort(key=lambda g: -sum(per_group[g].values()))  # stable: shuffled order among equal sizes
    fill: list[dict[Hashable, int]] = [defaultdict(int) for _ in SPLITS]
    out: dict[str, Split] = {}
    for g in order:
        cost = []
        for k, frac in enumerate(fractions):
            cost.append(sum(c * (fill[k][s] + c) / (frac * total[s]) for s, c in per_group[g].items()))
        best = int(np.argmin(cost))
        out[g] = SPLITS[best]
        for s, c in per_group[g].items():
            fill[best][s] += c
    return out


def balance_lengths(lengths: Sequence[int], labels: Sequence[int], *, seed: int = 42) -> np.ndarray:
    """Indices to keep so that every length has equally many label-0 and label-1 items.

    At each length, the larger label is subsampled (uniformly, with ``seed``) down to the smaller
    one's count; a length with only one label is dropped entirely.

    Args:
        lengths: [N] int. Answer length in words.
        labels: [N] int. 1 = hallucinated, 0 = supported.
        seed: seed of the subsampling.

    Returns:
        np.ndarray: ``[M] int64``, sorted indices of the kept items.
    """
    ln = np.asarray(lengths)
    y = np.asarray(labels)
    if ln.shape != y.shape or ln.ndim != 1:
        raise ValueError(f"lengths and labels must be 1-D of equal length, got {ln.shape} and {y.shape}")
    rng = np.random.default_rng(seed)
    keep: list[int] = []
    for length in np.unique(ln):
        pos = np.flatnonzero((ln == length) & (y == 1))
        neg = np.flatnonzero((ln == length) & (y == 0))
        m = min(pos.size, neg.size)
        keep.extend(rng.choice(pos, m, replace=False))
        keep.extend(rng.choice(neg, m, replace=False))
    return np.sort(np.asarray(keep, dtype=np.int64))
