r"""Text-only grounding signals: how much of an answer its context (and question) never mention.

Everything here reads text only (no model) and is deterministic, pure Python and linear in the
length of the texts (sets of normalised words and n-grams).

**Words.** The answer, context and question are cut into words with one rule for every language:

* a *number* is a run of digits with inner ``.`` or ``,`` separators (``3.5``, ``1,200``);
  thousands separators are dropped (``1,200`` and ``1200`` are the same number);
* a CJK ideograph or kana character is one word on its own (those scripts do not separate words);
* any other run of letters (Unicode ``\w`` without digits and ``_``) is one word.

A word is normalised by NFKC, ``casefold`` and, for Latin words longer than three letters, by
dropping one trailing ``s`` (``companies``/``company`` stay distinct, ``votes``/``vote`` match).
A word is a *content word* unless it is an English stop word (`STOP_WORDS`) or a single letter of
a cased script; numbers are always content words.

**Support.** The *support set* is the normalised words of the context **and the question**: an
answer may repeat the question ("Who wrote X? X was written by ...") without inventing anything. An
answer word is *unsupported* when its normalised form occurs nowhere in the support set. N-grams
are taken over all words (stop words included) of the context and of the question separately,
never across the two.

Scores and features: higher means more likely hallucinated (except the length features, which
carry no sign).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = [
    "GROUNDING_FEATURES",
    "STOP_WORDS",
    "AnswerWord",
    "answer_words",
    "grounding_features",
    "overlap_score",
    "unsupported_char_spans",
]

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"(?P<num>\d+(?:[.,]\d+)*)|(?P<cjk>[{_CJK}])|(?P<word>[^\W\d_{_CJK}]+)")
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+")
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)|[\u3002\uff01\uff1f]+|\n")
_LOW_SUPPORT = 0.5

STOP_WORDS: frozenset[str] = frozenset(
    """a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each either else ever every few for from
    further had has have having he her here hers herself him himself his how however i if in into is it its
    itself just let may me might more most must my myself neither no nor not now of off on once only or other
    otherwise our ours ourselves out over own per same shall she should since so some such than that the their
    theirs them themselves then there these they this those though through thus to too under until up upon us
    very via was we were what when where whether which while who whom whose why will with within without
    would yes yet you your yours yourself yourselves""".split()
)
"""English function words that never count as content (matched after casefolding)."""

GROUNDING_FEATURES: tuple[str, ...] = (
    "unsupported_word_share",
    "unsupported_distinct_word_share",
    "unsupported_number_share",
    "log_unsupported_numbers",
    "unsupported_entity_share",
    "unsupported_bigram_share",
    "unsupported_trigram_share",
    "longest_unsupported_run",
    "low_support_sentence_share",
    "max_sentence_unsupported_share",
    "log_answer_words",
    "log_answer_context_ratio",
)
"""Names of `grounding_features`' columns, in order.

* ``unsupported_word_share``: `overlap_score`, unsupported share of the answer's content-word
  occurrences.
* ``unsupported_distinct_word_share``: the same over distinct content words.
* ``unsupported_number_share``: unsupported share of the answer's number occurrences (0 without numbers).
* ``log_unsupported_numbers``: ``log1p`` of the count of unsupported number occurrences.
* ``unsupported_entity_share``: unsupported share of entity-like words: content words written with
  a capital that do not start a sentence, or all-capital words of two letters or more (0 without
  any, as in scripts without case).
* ``unsupported_bigram_share`` / ``unsupported_trigram_share``: share of the answer's word 2- and
  3-grams (all words) absent from the context's and the question's (0 when the answer is shorter).
* ``longest_unsupported_run``: longest run of consecutive unsupported content words, divided by
  the answer's content words.
* ``low_support_sentence_share``: share of answer sentences (with content words) in which at
  least half of the content words are unsupported.
* ``max_sentence_unsupported_share``: the highest unsupported content-word share of one sentence.
* ``log_answer_words``: ``log1p`` of the answer's word count.
* ``log_answer_context_ratio``: ``log((answer words + 1) / (context + question words + 1))``.
"""


@dataclass(frozen=True)
class AnswerWord:
    """One word of an answer, with its character range and support."""

    start: int
    """First character of the word in the answer."""
    end: int
    """One past its last character."""
    key: str
    """Normalised form, the one compared with the context."""
    kind: str
    """``"number"``, ``"word"`` or ``"cjk"``."""
    content: bool
    """False for stop words and single letters of cased scripts."""
    entity: bool
    """Capitalised mid-sentence or all-capital content word (entity-like)."""
    supported: bool
    """Whether ``key`` occurs in the context or the question."""
    sentence: int
    """Index of the answer sentence the word belongs to."""


@lru_cache(maxsize=1 << 16)
def _key(text: str, kind: str) -> tuple[str, bool]:
    """The normalised form of one word and whether it is a content word."""
    t = unicodedata.normalize("NFKC", text).casefold()
    if kind == "number":
        return (t.replace(",", "") if _THOUSANDS.fullmatch(t) else t), True
    if kind != "word":
        return t, True
    content = t not in STOP_WORDS and not (len(t) == 1 and t.upper() != t.lower())
    if len(t) > 3 and t.endswith("s") and not t.endswith("ss") and t.isascii():
        t = t[:-1]
    return t, content


def _tokens(text: str) -> list[tuple[int, int, str, str, bool]]:
    """(start, end, key, kind, content) of every word of ``text``."""
    out = []
    for m in _TOKEN.finditer(text):
        kind = "number" if m.lastgroup == "num" else str(m.lastgroup)
        key, content = _key(m.group(), kind)
        out.append((m.start(), m.end(), key, kind, content))
    return out


def _keys(text: str) -> list[str]:
    """The normalised forms of every word of ``text`` (`_tokens` without offsets, faster)."""
    return [
        _key(num, "number")[0] if num else _key(cjk, "cjk")[0] if cjk else _key(word, "word")[0]
        for num, cjk, word in _TOKEN.findall(text)
    ]


def _ngrams(keys: list[str], n: int) -> set[tuple[str, ...]]:
    return set(zip(*(keys[i:] for i in range(n)), strict=False))


@dataclass(frozen=True)
class _Support:
    words: frozenset[str]
    bigrams: frozenset[tuple[str, ...]]
    trigrams: frozenset[tuple[str, ...]]
    n_words: int


@lru_cache(maxsize=32)
def _support(context: str, question: str) -> _Support:
    """The support sets of a (context, question) pair; cached since many answers share a context."""
    keys = [_keys(part) for part in (context, question)]
    return _Support(
        words=frozenset(k for ks in keys for k in ks),
        bigrams=frozenset(g for ks in keys for g in _ngrams(ks, 2)),
        trigrams=frozenset(g for ks in keys for g in _ngrams(ks, 3)),
        n_words=sum(len(ks) for ks in keys),
    )


def _check(context: str, question: str, answer: str) -> None:
    for name, value in (("context", context), ("question", question), ("answer", answer)):
        if not isinstance(value, str):
            raise TypeError(f"grounding: {name} must be a str, got {type(value).__name__}")
    if not answer.strip():
        raise ValueError("grounding: answer is empty; expected a non-empty answer text")


def answer_words(context: str, question: str, answer: str) -> list[AnswerWord]:
    """Every word of ``answer`` with its normalised form, role and support, in order.

    The per-word view behind every score here; span and token code can map model tokens onto
    these character ranges.

    Raises:
        ValueError: when ``answer`` is empty or only whitespace.
        TypeError: when an argument is not a str.
    """
    _check(context, question, answer)
    support = _support(context, question).words
    breaks = [m.end() for m in _SENTENCE_END.finditer(answer)]
    out: list[AnswerWord] = []
    sentence, b, sentence_start = 0, 0, True
    for start, end, key, kind, content in _tokens(answer):
        while b < len(breaks) and breaks[b] <= start:
            b += 1
            sentence += 1
            sentence_start = True
        raw = answer[start:end]
        capital = kind == "word" and raw[0].isupper()
        entity = content and capital and (not sentence_start or (len(raw) > 1 and raw.isupper()))
        out.append(AnswerWord(start, end, key, kind, content, entity, key in support, sentence))
        sentence_start = False
    return out


def overlap_score(context: str, question: str, answer: str) -> float:
    """The zero-fit context-overlap floor: the unsupported share of the answer's content words.

    ``#(content-word occurrences of the answer whose normalised form occurs in neither the context
    nor the question) / #(content-word occurrences of the answer)``, with words, normalisation and
    support as in the module docstring. An answer with no content word (``"Yes."``) scores 0.

    Args:
        context: the grounding text (may be empty: every content word is then unsupported).
        question: the question or instruction (may be empty); it counts as context.
        answer: the answer to check; must not be empty.

    Returns:
        float in [0, 1]. Higher means more likely hallucinated.

    Raises:
        ValueError: when ``answer`` is empty or only whitespace.
    """
    content = [w for w in answer_words(context, question, answer) if w.content]
    if not content:
        return 0.0
    return sum(not w.supported for w in content) / len(content)


def _share(bad: int, total: int) -> float:
    return bad / total if total else 0.0


def _sentence_shares(content: list[AnswerWord]) -> list[float]:
    per: dict[int, list[bool]] = {}
    for w in content:
        per.setdefault(w.sentence, []).append(not w.supported)
    return [sum(v) / len(v) for v in per.values()]


def grounding_features(context: str, question: str, answer: str) -> np.ndarray:
    """Text-only grounding signals of one answer, in the order of `GROUNDING_FEATURES`.

    Args:
        context: the grounding text (may be empty).
        question: the question or instruction (may be empty); it counts as context.
        answer: the answer to check; must not be empty.

    Returns:
        features: [len(GROUNDING_FEATURES)] float64. Shares lie in [0, 1]; higher shares mean
        more likely hallucinated.

    Raises:
        ValueError: when ``answer`` is empty or only whitespace.
    """
    words = answer_words(context, question, answer)
    sup = _support(context, question)
    content = [w for w in words if w.content]
    numbers = [w for w in content if w.kind == "number"]
    entities = [w for w in content if w.entity]
    keys = [w.key for w in words]
    bigrams, trigrams = _ngrams(keys, 2), _ngrams(keys, 3)
    distinct = {w.key: w.supported for w in content}
    run = longest = 0
    for w in content:
        run = run + 1 if not w.supported else 0
        longest = max(longest, run)
    shares = _sentence_shares(content)
    bad_numbers = sum(not w.supported for w in numbers)
    return np.array(
        [
            _share(sum(not w.supported for w in content), len(content)),
            _share(sum(not s for s in distinct.values()), len(distinct)),
            _share(bad_numbers, len(numbers)),
            math.log1p(bad_numbers),
            _share(sum(not w.supported for w in entities), len(entities)),
            _share(len(bigrams - sup.bigrams), len(bigrams)),
            _share(len(trigrams - sup.trigrams), len(trigrams)),
            _share(longest, len(content)),
            _share(sum(s >= _LOW_SUPPORT for s in shares), len(shares)),
            max(shares, default=0.0),
            math.log1p(len(words)),
            math.log((len(words) + 1) / (sup.n_words + 1)),
        ],
        dtype=np.float64,
    )


def unsupported_char_spans(context: str, question: str, answer: str) -> list[tuple[int, int]]:
    """Character ranges of the answer made of content words that occur nowhere in the context.

    Consecutive unsupported content words of one sentence form one span when only stop words,
    single letters, spaces or punctuation lie between them (``"Paris and Berlin"``); a supported
    content word or a sentence end closes the span. Ranges run from the first unsupported word's
    first character to the last one's end (end exclusive), ascending and disjoint.

    Raises:
        ValueError: when ``answer`` is empty or only whitespace.
    """
    spans: list[tuple[int, int]] = []
    open_span: tuple[int, int, int] | None = None  # (start, end, sentence)
    for w in answer_words(context, question, answer):
        if not w.content:
            continue
        if w.supported:
            if open_span is not None:
                spans.append(open_span[:2])
            open_span = None
        elif open_span is not None and open_span[2] == w.sentence:
            open_span = (open_span[0], w.end, w.sentence)
        else:
            if open_span is not None:
                spans.append(open_span[:2])
            open_span = (w.start, w.end, w.sentence)
    if open_span is not None:
        spans.append(open_span[:2])
    return spans
