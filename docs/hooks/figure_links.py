"""MkDocs hook: every raster figure links to its own file, so a phone reader can open it full size.

The result figures (ROC grid, bar and performance charts) are 1100-1600 px wide and shrink to the
column's width, about 470 px on a phone. Each ``<img>`` whose source is a PNG or JPEG and that is not
already inside a link is wrapped in ``<a class="figure-link" href="SRC">``; the SVG diagrams stay as
they are (they scale without losing detail).
"""

from __future__ import annotations

import re

_LINK = re.compile(r"(<a\b.*?</a>)", re.S)
_IMG = re.compile(r'<img\b[^>]*\bsrc="([^"]+\.(?:png|jpe?g))"[^>]*>', re.I)


def link_figures(page_html: str) -> str:
    """``page_html`` with each PNG/JPEG ``<img>`` outside a link wrapped in a link to its source."""
    parts = _LINK.split(page_html)
    return "".join(
        p
        if p.startswith("<a")
        else _IMG.sub(lambda m: f'<a class="figure-link" href="{m.group(1)}">{m.group(0)}</a>', p)
        for p in parts
    )


def on_page_content(content: str, page, config, files) -> str:  # noqa: D103 (MkDocs hook signature)
    return link_figures(content)
