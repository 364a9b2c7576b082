"""Screenshots of the built site in headless Chromium, at desktop and phone width.

Builds the site, serves it on 127.0.0.1, and saves one PNG per (page, width) into
``site-screenshots/`` (git-ignored; reduced to 64 colours to keep them small). Needs Debian's
``chromium`` (``apt-get install -y chromium``). Run from the repository root:
``uv run python docs/scripts/screenshots.py``. For a page named with ``#heading`` the shot is of a copy of the
page with the content between its title and that heading left out (headless Chromium does not scroll to
a fragment before it shoots), so a table further down is in view; scrollbars are kept, so a table that
scrolls sideways shows its bar.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "site-screenshots"
WIDTHS = {"1400": (1400, 1100), "390": (390, 1400)}
PAGES = {
    "home": "",
    "statistics": "reference/statistics/#notation-and-masking",
    "statistics-table": "reference/statistics/",
    "api": "api/flashstats_kernels/",
    "results-detection": "results/detection/#main-table",
    "results-roc": "results/detection/#roc-curves-per-task",
    "results-localisation": "results/detection/#token-level-localisation-ragtruth-spans",
    "streaming-cost": "guide/streaming/#cost",
    "results-performance": "results/performance/#what-you-pay-per-model-family-and-length",
    "reproduce": "results/reproduce/#tables",
    "results-reproducibility": "results/performance/#reproducibility",
    "results-transfer-reader": "results/transfer/#the-fine-tuned-reader",
    "packaged-threshold": "guide/packaged-detector/#calibration",
}


def shoot(browser: str, url: str, path: Path, size: tuple[int, int]) -> None:
    """One screenshot of ``url`` with a window of ``size`` pixels, written to ``path``."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
             f"--screenshot={path}", f"--window-size={size[0]},{size[1]}", url],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    Image.open(path).convert("RGB").quantize(64).save(path, optimize=True)


def from_heading(site: Path, page: str) -> str:
    """The URL path to shoot for ``page``: a trimmed copy when it names a ``#heading``, else the page."""
    if "#" not in page:
        return page
    path, anchor = page.split("#", 1)
    html = (site / path / "index.html").read_text()
    title_end = html.index("</h1>") + len("</h1>")
    heading = re.search(rf'<h[2-6][^>]*id="{re.escape(anchor)}"', html)
    if heading is None:
        raise ValueError(f"{page}: no heading with id {anchor!r}")
    (site / path / "shot.html").write_text(html[:title_end] + html[heading.start() :])
    return f"{path}shot.html"


def main() -> None:
    """Build, serve and shoot every page at every width."""
    browser = shutil.which("chromium") or sys.exit("chromium is not installed (apt-get install -y chromium)")
    site = Path(tempfile.mkdtemp()) / "site"
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                   check=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # fmt: skip
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        for name, page in PAGES.items():
            for label, size in WIDTHS.items():
                url = f"http://127.0.0.1:{server.server_port}/{from_heading(site, page)}"
                shoot(browser, url, OUT / f"{name}-{label}.png", size)
                print(OUT / f"{name}-{label}.png")
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
