"""The built site's layout in headless Chromium: nothing sticks out of the page, no code name breaks mid-word.

For a set of pages (the table-heavy ones) at 1400 px and at a phone's width, a copy of each page with a
checking script is loaded in headless Chromium (``--dump-dom``; the site is read from disk, nothing is
fetched from another host). The script reports: the page's own horizontal overflow (anything wider than the
window that does not scroll inside its own box), tables wider than the content column that do not sit in a
scrolling box, and inline code words (``--no-progress``, ``rows.normalized_entropy``) laid out over two lines.
At 1400 px the statistics reference table and the detection main table must fit without scrolling. Headless
Chromium lays pages out at least 500 px wide, so "phone" is 500 px here (below Material's 720 px
breakpoint, so the phone layout); the screenshots of ``docs/scripts/screenshots.py`` are at 390 px.
Skipped where Chromium is not installed (``apt-get install -y chromium``).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs headless Chromium (apt-get install -y chromium)"
)
PAGES = [
    "index.html",
    "reference/statistics/index.html",
    "reference/t1/index.html",
    "guide/cli-conventions/index.html",
    "reference/datasets/index.html",
    "results/detection/index.html",
    "results/performance/index.html",
    "results/reproduce/index.html",
    "api/halujudge/index.html",
]
WIDTHS = (1400, 500)
CHECK = r"""<script>
window.addEventListener('load', () => setTimeout(() => {
  const vw = document.documentElement.clientWidth;
  const out = {vw, overflow: [], unboxed: [], broken: [], tables: []};
  const content = document.querySelector('.md-content__inner') || document.body;
  const right = content.getBoundingClientRect().right;
  const scrolls = e => { for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
    if (['auto', 'scroll'].includes(getComputedStyle(p).overflowX)) return true; } return false; };
  if (document.documentElement.scrollWidth > vw + 1)
    for (const e of content.querySelectorAll('*'))
      if (e.getBoundingClientRect().right > vw + 1 && !scrolls(e)) { out.overflow.push(e.tagName); break; }
  content.querySelectorAll('table').forEach(t => {
    const box = t.closest('.md-typeset__scrollwrap');
    out.tables.push({head: t.querySelector('th') ? t.querySelector('th').textContent.trim() : '',
                     fits: !box || box.scrollWidth <= box.clientWidth + 1});
    if (t.getBoundingClientRect().right > right + 1 && !scrolls(t))
      out.unboxed.push(t.textContent.slice(0, 40));
  });
  content.querySelectorAll(':not(pre) > code').forEach(c => {
    const text = c.textContent, lines = new Set([...c.getClientRects()].map(r => Math.round(r.top)));
    if (lines.size > 1 && !/\s/.test(text) && text.length <= 32) out.broken.push(text);
  });
  const pre = document.createElement('pre'); pre.id = 'layout-check'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 300));
</script>"""


def layout(page: Path, width: int) -> dict:
    """What the checking script reports for ``page`` (an HTML file) in a window ``width`` px wide."""
    checked = page.with_name(f"layout-check-{page.name}")
    checked.write_text(page.read_text().replace("</body>", CHECK + "</body>"))
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--no-first-run", f"--user-data-dir={profile}", f"--window-size={width},900",
             "--virtual-time-budget=3000", "--dump-dom", checked.as_uri()],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"{page}: the checking script did not report: {proc.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def problems(report: dict) -> dict:
    return {k: report[k] for k in ("overflow", "unboxed", "broken") if report[k]}


def test_checker_reports_overflow_unboxed_tables_and_broken_names(tmp_path):
    page = tmp_path / "page.html"
    page.write_text(
        '<html><body><div class="md-content__inner" style="width:300px">'
        '<table style="width:2000px"><tr><th>wide</th></tr></table>'
        '<p style="width:4em">a <code>--no-progress-bar</code> b</p>'
        '<div class="md-typeset__scrollwrap" style="overflow-x:auto"><table style="width:2000px">'
        "<tr><th>boxed</th></tr></table></div></div></body></html>"
    )
    report = layout(page, 800)
    assert report["vw"] == 800
    assert problems(report) == {"overflow": ["TABLE"], "unboxed": ["wide"], "broken": ["--no-progress-bar"]}
    assert [t["fits"] for t in report["tables"]] == [True, False]


@pytest.fixture(scope="module")
def site_copy(site, tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("layout") / "site"
    shutil.copytree(site, copy)
    return copy


FAST_PAGES = ("reference/statistics/index.html", "results/detection/index.html")
"""Pages whose layout the default run checks (their main tables must fit); the others are slow."""


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "page", [p if p in FAST_PAGES else pytest.param(p, marks=pytest.mark.slow) for p in PAGES]
)
def test_page_layout(site_copy, page, width):
    report = layout(site_copy / page, width)
    assert width - 20 <= report["vw"] <= width  # less a vertical scrollbar
    assert problems(report) == {}
    if width == 1400 and page in FAST_PAGES:
        main = next(t for t in report["tables"] if t["head"] in ("Statistic", "method"))
        assert main["fits"], f"{page}: the main table scrolls at 1400 px"
