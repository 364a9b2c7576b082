"""Sentence splitting and token-budget chunking for the grounding checkers."""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["chunk_document", "split_sentences"]

# Words that end with a period without ending a sentence (compared lower-case, without the final period).
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt vs etc approx e.g i.e cf al inc ltd co corp dept univ est fig no vol "
    "pp ed eds jan feb mar apr jun jul aug sep sept oct nov dec u.s u.k u.n a.m p.m ph.d b.a m.a".split()
)
# End punctuation, then closing quotes or brackets, then whitespace: a candidate boundary.
_BOUNDARY = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*\s+")


def _ends_sentence(block: str, match: re.Match[str], start: int) -> bool:
    before = block[start : match.start()].split()
    word = before[-1] if before else ""
    nxt = block[match.end() : match.end() + 1]
    if "." in match.group(0) and not any(c in match.group(0) for c in "!?"):
        bare = word.lower().rstrip(".")
        if bare in _ABBREVIATIONS or (len(bare) == 1 and bare.isalpha()):
            return False  # "Dr. Smith", "J. R. Tolkien"
        if len(before) == 1 and bare.isdigit():
            return False  # a list marker such as "1. " at the start of a line
    return not nxt.islower()  # "e.g. the" or "approx. three" continue the sentence


def split_sentences(text: str) -> list[str]:
    """Split text into sentences.

    A line break always ends a sentence. Inside a line, ``.``, ``!`` or ``?`` (possibly followed by closing
    quotes or brackets) and whitespace end a sentence unless the word before is a known abbreviation or a
    single letter (an initial), the period follows a list number at the start of the line, or the next
    word starts in lower case. Decimals (``3.5``) and dotted names (``example.com``) never split, since no
    whitespace follows their period.

    Args:
        text: any text.

    Returns:
        The non-empty sentences, stripped, in order. Empty for blank text.

    Raises:
        TypeError: if ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    sentences: list[str] = []
    for block in text.splitlines():
        start = 0
        for match in _BOUNDARY.finditer(block):
            if _ends_sentence(block, match, start):
                sentences.append(block[start : match.end()].strip())
                start = match.end()
        sentences.append(block[start:].strip())
    return [s for s in sentences if s]


def _split_long(sentence: str, max_tokens: int, count_tokens: Callable[[str], int]) -> list[str]:
    """Cut a sentence longer than the budget at word boundaries into pieces within the budget."""
    pieces: list[str] = []
    current: list[str] = []
    for word in sentence.split():
        if current and count_tokens(" ".join([*current, word])) > max_tokens:
            pieces.append(" ".join(current))
            current = []
        current.append(word)
    if current:
        pieces.append(" ".join(current))
    return pieces


def chunk_document(document: str, max_tokens: int, count_tokens: Callable[[str], int]) -> list[str]:
    """Pack a document's sentences greedily into chunks of at most ``max_tokens`` tokens.

    Sentences stay whole unless one alone exceeds the budget, in which case it is cut at word boundaries
    (a single word longer than the budget becomes its own chunk). Chunks are the sentences joined by one
    space. A document within the budget is returned as one chunk, unchanged.

    Args:
        document: the premise text.
        max_tokens: the token budget of a chunk (positive).
        count_tokens: the checker's token counter (``len(tokenizer(text).input_ids)`` without specials).

    Returns:
        At least one chunk (``[""]`` for an empty document).

    Raises:
        ValueError: if ``max_tokens`` is not positive.
    """
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    if count_tokens(document) <= max_tokens:
        return [document]
    chunks: list[str] = []
    current: list[str] = []
    for sentence in split_sentences(document):
        parts = [sentence] if count_tokens(sentence) <= max_tokens else None
        for part in parts or _split_long(sentence, max_tokens, count_tokens):
            if current and count_tokens(" ".join([*current, part])) > max_tokens:
                chunks.append(" ".join(current))
                current = []
            current.append(part)
    if current:
        chunks.append(" ".join(current))
    return chunks or [""]
