"""The built docs site loads nothing from another host, and every formula is MathML rendered at build time.

The site is built once (``mkdocs build --strict``) into a temporary folder; every HTML page's scripts,
stylesheets, fonts, images and frames, and every ``url()``/``@import`` in the site's CSS, must point into the
site itself. A synthetic page checks that the checker reports an external script, stylesheet and font.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]
# (tag, attribute) pairs whose URL the browser fetches when it renders the page
FETCHED = {("script", "src"), ("link", "href"), ("img", "src"), ("iframe", "src"), ("source", "src"),
           ("video", "src"), ("audio", "src"), ("embed", "src"), ("object", "data")}  # fmt: skip
# <link rel=...> values that are not fetched as a resource
LINK_NOT_FETCHED = {"canonical", "alternate", "author", "license", "help", "next", "prev"}
CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])([^'")\s]+)""")


def is_external(url: str) -> bool:
    """True for a URL that names a host (``https://x``, ``//x``) rather than a path inside the site."""
    parsed = urlparse(url.strip())
    return bool(parsed.netloc) or parsed.scheme not in ("", "data", "blob")


class _Fetches(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "link" and set((values.get("rel") or "").split()) & LINK_NOT_FETCHED:
            return
        for t, attr in FETCHED:
            if t == tag and values.get(attr):
                self.urls.append(values[attr])
        if values.get("style"):
            self.urls += CSS_URL.findall(values["style"])

    def handle_data(self, data: str) -> None:
        if self.lasttag == "style":
            self.urls += CSS_URL.findall(data)


def external_fetches(html: str) -> list[str]:
    """URLs on other hosts that a browser would fetch to render ``html`` (scripts, styles, fonts, ...)."""
    parser = _Fetches()
    parser.feed(html)
    return [u for u in parser.urls if is_external(u)]


def test_checker_reports_external_resources():
    page = """<html><head><link rel="stylesheet" href="https://fonts.example/css?family=Roboto">
    <link rel="canonical" href="https://example.org/page/"><style>@import "//cdn.example/x.css";
    body { font-family: x; src: url(https://cdn.example/f.woff2) }</style>
    <script src="../assets/local.js"></script><script src="https://cdn.example/mathjax.js"></script>
    </head><body><a href="https://example.org/">not fetched</a><img src="img/x.png"></body></html>"""
    assert external_fetches(page) == [
        "https://fonts.example/css?family=Roboto",
        "//cdn.example/x.css",
        "https://cdn.example/f.woff2",
        "https://cdn.example/mathjax.js",
    ]


def test_no_page_loads_from_another_host(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 10
    offenders = {str(p.relative_to(site)): bad for p in pages if (bad := external_fetches(p.read_text()))}
    assert offenders == {}


def test_no_stylesheet_loads_from_another_host(site):
    sheets = sorted(site.rglob("*.css"))
    assert sheets
    offenders = {str(p.relative_to(site)): bad for p in sheets
                 if (bad := [u for u in CSS_URL.findall(p.read_text()) if is_external(u)])}  # fmt: skip
    assert offenders == {}


def test_formulas_are_mathml_built_into_the_page(site):
    pages = sorted(site.rglob("*.html"))
    leftover = {
        str(p.relative_to(site)) for p in pages if re.search(r'class="arithmatex">\\[(\[]', p.read_text())
    }
    assert leftover == set()
    statistics = (site / "reference" / "statistics" / "index.html").read_text()
    assert statistics.count("<math ") >= 20


def search_tokens(site: Path) -> set[str]:
    """Lower-cased words of the search index, split with the separator the site's search uses."""
    import json

    index = json.loads((site / "search" / "search_index.json").read_text())
    separator = re.compile(index["config"]["separator"])
    tokens: set[str] = set()
    for doc in index["docs"]:
        text = re.sub(r"<[^>]+>", " ", f"{doc['title']} {doc['text']}")
        tokens.update(t.lower() for t in separator.split(text) if t)
    return tokens


def test_search_finds_code_names(site):
    tokens = search_tokens(site)
    missing = {
        "attnstats",
        "record_forward",
        "response_attention",
        "halluprobe",
        "graphedrecorder",
        "statsrequest",
    } - tokens
    assert missing == set()


def _rendered_members(site: Path) -> dict[str, list[str]]:
    """``module.Class`` -> the members rendered under it on the API pages, in page order."""
    out: dict[str, list[str]] = {}
    for page in sorted((site / "api").rglob("*.html")):
        for anchor in re.findall(r'id="((?:flashstats|halu)\w*(?:\.\w+)+)"', page.read_text()):
            owner, _, member = anchor.rpartition(".")
            out.setdefault(owner, []).append(member)
    return out


def test_dataclass_fields_render_in_source_order_statistics_first(site):
    import dataclasses
    import importlib

    rendered = _rendered_members(site)
    checked = []
    for owner, members in rendered.items():
        module, _, name = owner.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            continue
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            continue
        fields = [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]
        shown = [m for m in dict.fromkeys(members) if m in fields]
        assert shown == fields, owner  # every public field, in source order
        checked.append(owner)
    assert "flashstats_hf.ForwardStats" in checked and len(checked) >= 10
    assert rendered["flashstats_hf.ForwardStats"][:3] == ["rows", "lookups", "columns"]


# a "Type" cell of an API page's Parameters/Attributes (second column) or Returns/Yields/Raises (first column)
_SECTION = re.compile(r'doc-section-title">(\w+):</span></p>\s*<table>(.*?)</table>', re.S)
_ROW = re.compile(r'<tr class="doc-section-item">(.*?)</tr>', re.S)
_CELL = re.compile(r"<td>(.*?)</td>", re.S)
_TYPE_COLUMN = {"Parameters": 1, "Attributes": 1, "Returns": 0, "Yields": 0, "Raises": 0}


def section_types(page_html: str) -> list[tuple[str, str]]:
    """``(section, type text)`` of every row of an API page's typed sections (Parameters, Returns, ...)."""
    import html

    out = []
    for section, table in _SECTION.findall(page_html):
        column = _TYPE_COLUMN.get(section)
        for row in _ROW.findall(table) if column is not None else ():
            cells = _CELL.findall(row)
            if len(cells) > column:
                out.append((section, html.unescape(re.sub(r"<[^>]+>", "", cells[column])).strip()))
    return out


def bad_types(page_html: str) -> list[tuple[str, str]]:
    """Type cells that are not a Python expression (a Returns line whose text before a colon is prose)."""
    import ast

    bad = []
    for section, text in section_types(page_html):
        try:
            ast.parse(text, mode="eval")
        except SyntaxError:
            bad.append((section, text))
    return bad


def test_type_checker_reports_prose_and_literals():
    row = '<tr class="doc-section-item"><td><code>{}</code></td><td><p>d</p></td></tr>'
    page = (
        '<p><span class="doc-section-title">Returns:</span></p>\n<table><tbody>'
        + row.format("tuple[list[int], int]")
        + row.format("``(input_ids, response_start)``")
        + row.format("ForwardStats of copies (later calls do not change them")
        + "</tbody></table>"
    )
    assert bad_types(page) == [
        ("Returns", "``(input_ids, response_start)``"),
        ("Returns", "ForwardStats of copies (later calls do not change them"),
    ]


def test_api_types_are_python_types(site):
    pages = sorted((site / "api").rglob("*.html"))
    typed = [t for p in pages for t in section_types(p.read_text())]
    assert len(typed) > 200 and {s for s, _ in typed} >= {"Parameters", "Returns", "Raises"}
    offenders = {str(p.relative_to(site)): bad for p in pages if (bad := bad_types(p.read_text()))}
    assert offenders == {}


def test_inline_code_words_are_kept_whole(site):
    # docs/hooks/nowrap.py: a word of inline code is one unbreakable span; code blocks are left alone
    conventions = (site / "guide" / "cli-conventions" / "index.html").read_text()
    assert '<code><span class="nobr">--no-progress</span></code>' in conventions
    statistics = (site / "reference" / "statistics" / "index.html").read_text()
    assert '<span class="nobr">rows.normalized_entropy</span>' in statistics
    assert not re.search(r"<pre\b(?:(?!</pre>).)*nobr", conventions, re.S)


def test_raster_figures_link_to_their_full_size_file(site):
    # docs/hooks/figure_links.py: a phone shows a 1400 px chart at about 470 px; a tap opens the file
    pages = sorted(site.rglob("*.html"))
    figures = [(p, m) for p in pages for m in re.finditer(r'<img\b[^>]*\bsrc="([^"]+\.png)"', p.read_text())]
    assert len(figures) >= 6  # detection bars and ROC grid, the performance charts
    for page, m in figures:
        before = page.read_text()[: m.start()]
        assert before.endswith(f'<a class="figure-link" href="{m.group(1)}">'), (page, m.group(1))
        assert (page.parent / m.group(1)).is_file(), (page, m.group(1))
    svg = (site / "index.html").read_text()
    assert "passes.svg" in svg and 'href="img/passes.svg"' not in svg  # diagrams stay as they are


PHONE_PX = 390
_LENGTH = re.compile(r"^\s*([\d.]+)\s*(px|pt|)\s*$")


def _px(value: str) -> float | None:
    """A CSS/SVG length in px (``pt`` converted), or None for relative or missing lengths."""
    m = _LENGTH.match(value or "")
    return None if m is None else float(m.group(1)) * (4 / 3 if m.group(2) == "pt" else 1)


def diagram_problems(page_html: str, svg_file_text) -> list[str]:
    """Why the diagrams of a built page would not fit a phone: no viewBox, or a fixed width over 390 px.

    ``svg_file_text(src)`` returns the text of an ``<img>``'s SVG file. A diagram's own width (an SVG file's
    ``width`` attribute) is only its natural size; what sets the width on the page is the ``<img>`` or
    inline ``<svg>`` element's ``width`` attribute or inline style, which must not fix it wider than a phone.
    """
    article = page_html[page_html.find("<article") : page_html.rfind("</article>")]
    out = []
    for m in re.finditer(r"<(img|svg)\b([^>]*)>", article):
        tag, attrs = m.group(1), dict(re.findall(r'([\w:-]+)="([^"]*)"', m.group(2)))
        src = attrs.get("src", "")
        if tag == "img" and not src.endswith(".svg"):
            continue
        root = attrs if tag == "svg" else dict(re.findall(r'([\w:-]+)="([^"]*)"', re.search(
            r"<svg\b([^>]*)>", svg_file_text(src)).group(1)))  # fmt: skip
        if "viewBox" not in root:
            out.append(f"{src or 'inline svg'}: no viewBox (it cannot scale)")
        style_width = re.search(r"(?:^|;)\s*(?:min-)?width\s*:\s*([^;]+)", attrs.get("style", ""))
        for width in (attrs.get("width"), style_width and style_width.group(1)):
            px = _px(width) if width else None
            if px is not None and px > PHONE_PX:
                out.append(
                    f"{src or 'inline svg'}: fixed width {width} on the page, wider than {PHONE_PX} px"
                )
    return out


def test_checker_reports_diagrams_that_cannot_fit_a_phone():
    files = {"a.svg": '<svg width="600pt" height="200pt">', "b.svg": '<svg viewBox="0 0 600 200">'}
    page = ('<article><img src="a.svg"><img src="b.svg" width="700">'
            '<img src="b.svg" style="width: 500px"><svg width="24" viewBox="0 0 24 24"></svg>'
            '<img src="b.svg" class="diagram"></article>')  # fmt: skip
    found = diagram_problems(page, files.__getitem__)
    assert found == ["a.svg: no viewBox (it cannot scale)",
                     "b.svg: fixed width 700 on the page, wider than 390 px",
                     "b.svg: fixed width 500px on the page, wider than 390 px"]  # fmt: skip


def test_diagrams_scale_or_scroll_on_a_phone(site):
    pages = sorted(site.rglob("*.html"))
    found, diagrams = [], 0
    for page in pages:
        text = page.read_text()
        diagrams += len(re.findall(r'<img\b[^>]*src="[^"]+\.svg"', text))
        found += [f"{page.relative_to(site)}: {p}" for p in diagram_problems(
            text, lambda src, page=page: (page.parent / src).read_text())]  # fmt: skip
    assert diagrams >= 4 and found == []
    # at phone width a diagram either shrinks to the column or scrolls inside its own box (docs/stylesheets)
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text()
    phone = css[css.index("@media screen and (max-width: 44.9375em)") :]
    assert re.search(r"p:has\(> img\.diagram\)\s*\{[^}]*overflow-x:\s*auto", phone) or re.search(
        r"img\.diagram\s*\{[^}]*max-width:\s*100%", phone)  # fmt: skip
