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
