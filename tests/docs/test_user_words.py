"""The docs and every README speak to users: no tracker numbers and no story of how the work was done.

Every Markdown page under ``docs/`` and every ``README.md`` in the repository is searched for process words:
tracker references ("issue 13", "#13"), the words of how machines were borrowed and work was shared ("lent",
"helper", "session", "the team", "the lead") and the names of the tools that ran the work ("device tool",
"device call", "the ``run`` verb"). A page that needs to say one of these in its ordinary sense says it
another way.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROCESS_WORDS = {
    "a tracker reference": r"\bissues?\s*#?\d+|(?<![\w&/#])#\d+\b",
    "lent": r"\blent\b",
    "helper": r"\bhelpers?\b",
    "session": r"\bsessions?\b",
    "the team": r"\b(the|our) team\b|\bteam lead\b|\bthe lead\b",
    "a tool of the work": r"\bdevice (tool|calls?|time|image)\b|`run` (verb|tool|call)|\blent image\b",
}
PATTERN = re.compile("|".join(f"(?P<g{i}>{p})" for i, p in enumerate(PROCESS_WORDS.values())), re.IGNORECASE)


def user_pages() -> list[Path]:
    """Every Markdown page of the docs and every README of the repository (tracked or not yet added)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "docs", "*README.md"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return sorted(ROOT / p for p in set(listed) if p.endswith(".md") and (ROOT / p).is_file())


def process_words(text: str) -> list[str]:
    """``"line N: kind: 'match'"`` for every process word in ``text``."""
    kinds = list(PROCESS_WORDS)
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in PATTERN.finditer(line):
            kind = kinds[int(next(k for k, v in m.groupdict().items() if v is not None)[1:])]
            out.append(f"line {number}: {kind}: {m.group(0)!r}")
    return out


def test_pages_are_found():
    pages = {p.relative_to(ROOT).as_posix() for p in user_pages()}
    assert {"README.md", "docs/index.md", "benchmarks/README.md", "docs/results/performance.md"} <= pages


@pytest.mark.parametrize("page", user_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_page_speaks_to_users(page):
    assert process_words(page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "text",
    ["see issue 13", "Issue #7 asked", "fixed in #13.", "on the lent H200", "the helper wrote",
     "this session", "the team lead's hold-out", "one device call", "the `run` verb"],
)  # fmt: skip
def test_checker_finds_process_words(text):
    assert process_words(text) != []


@pytest.mark.parametrize(
    "text",
    ["the issues a user may meet", "[Main table](#main-table)", "colour #1f77b4;", "&#8203;", "a lenticular"],
)
def test_checker_leaves_ordinary_text(text):
    assert process_words(text) == []
