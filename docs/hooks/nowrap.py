"""MkDocs hook: inline code never breaks in the middle of a name.

Browsers break inline code after a hyphen or a slash, so ``--no-progress`` or ``trivia-plus`` could end one
line and start the next in the middle. This hook wraps every whitespace-free word of inline code (outside
``<pre>`` blocks, up to ``MAX_WORD`` characters) in ``<span class="nobr">``, which the site's CSS keeps on
one line; a command with spaces still wraps between its words, and a longer word (a path) may still break
rather than widen a phone's page.
"""

from __future__ import annotations

import re

MAX_WORD = 32
_PRE = re.compile(r"(<pre\b.*?</pre>)", re.S)
_CODE = re.compile(r"<code>([^<]+)</code>")
_WORD = re.compile(r"\S+")


def _nobr(match: re.Match[str]) -> str:
    words = _WORD.sub(
        lambda w: f'<span class="nobr">{w.group(0)}</span>' if len(w.group(0)) <= MAX_WORD else w.group(0),
        match.group(1),
    )
    return f"<code>{words}</code>"


def keep_code_words_whole(page_html: str) -> str:
    """``page_html`` with each short word of inline code (not in ``<pre>``) in a ``nobr`` span."""
    parts = _PRE.split(page_html)
    return "".join(p if p.startswith("<pre") else _CODE.sub(_nobr, p) for p in parts)


def on_page_content(content: str, page, config, files) -> str:  # noqa: D103 (MkDocs hook signature)
    return keep_code_words_whole(content)
