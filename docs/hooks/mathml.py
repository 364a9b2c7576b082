r"""MkDocs hook: render the TeX of every page to MathML while the site is built.

`pymdownx.arithmatex` (generic mode) leaves ``\(...\)`` and ``\[...\]`` in spans and divs of class
``arithmatex``; this hook replaces each with the MathML that ``latex2mathml`` produces. Browsers render
MathML natively, so a page needs no script, no web font and no network to show its formulas.
"""

from __future__ import annotations

import html
import re

from latex2mathml.converter import convert

_INLINE = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.DOTALL)
_BLOCK = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.DOTALL)


def _render(tex: str, display: str, where: str) -> str:
    source = html.unescape(tex).strip()
    try:
        mathml = convert(source, display=display)
    except Exception as err:  # latex2mathml raises bare exceptions; name the formula and the page
        raise ValueError(f"{where}: cannot render TeX {source!r} to MathML: {err}") from err
    return mathml.replace("<math ", f'<math alttext="{html.escape(source)}" ', 1)


def tex_to_mathml(page_html: str, where: str = "<page>") -> str:
    """Replace arithmatex's TeX spans and divs in ``page_html`` by MathML.

    Args:
        page_html: The HTML of one page, as Python-Markdown produced it.
        where: The page's name, used in error messages.

    Returns:
        The HTML with every formula as a ``<math>`` element (blocks keep their ``arithmatex`` div).
    """
    page_html = _BLOCK.sub(
        lambda m: f'<div class="arithmatex">{_render(m.group(1), "block", where)}</div>', page_html
    )
    return _INLINE.sub(
        lambda m: f'<span class="arithmatex">{_render(m.group(1), "inline", where)}</span>', page_html
    )


def on_page_content(content: str, page, config, files) -> str:  # noqa: D103 (MkDocs hook signature)
    return tex_to_mathml(content, page.file.src_uri)
