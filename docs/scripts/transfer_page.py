"""Copy the recorded ``halluprobe transfer`` output into the docs' transfer page.

``benchmarks/results/transfer/transfer.md`` is the Markdown that ``halluprobe transfer`` writes (its
`TransferTable.to_markdown`); its tables replace the block between ``<!-- transfer-run:start -->`` and
``<!-- transfer-run:end -->`` of ``docs/results/transfer.md``, and its ``reliability.png`` becomes
``docs/results/img/transfer_reliability.png``. The fine-tuned reader's run
(``benchmarks/results/transfer_reader/transfer.md``), when recorded, replaces the ``transfer-reader``
block likewise. Nothing else of the page changes.

Run from the repository root: ``uv run python docs/scripts/transfer_page.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "results" / "transfer"
PAGE = ROOT / "docs" / "results" / "transfer.md"
IMAGE = ROOT / "docs" / "results" / "img" / "transfer_reliability.png"
START, END = "<!-- transfer-run:start -->", "<!-- transfer-run:end -->"
READER_RUN = ROOT / "benchmarks" / "results" / "transfer_reader"
"""The fine-tuned reader's rows (``halluprobe transfer --reader-scores``, floors beside them)."""
READER_START, READER_END = "<!-- transfer-reader:start -->", "<!-- transfer-reader:end -->"


def block(markdown: str) -> str:
    """The tables of a ``transfer.md``: from its first table to the line before its figure."""
    lines = markdown.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    kept = [line for line in lines[first:] if not line.startswith("![")]
    return "\n".join(kept).strip() + "\n"


def render(page: str, markdown: str, start: str = START, end: str = END) -> str:
    """``page`` with its marked block replaced by `block` of ``markdown``; ValueError without markers."""
    if start not in page or end not in page:
        raise ValueError(f"{PAGE} lacks the markers {start} ... {end}")
    head, rest = page.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{block(markdown)}{end}{tail}"


def main() -> None:
    """Rewrite the page's block and its figure from the recorded run."""
    page = render(PAGE.read_text(encoding="utf-8"), (RUN / "transfer.md").read_text(encoding="utf-8"))
    if (READER_RUN / "transfer.md").is_file():
        reader = (READER_RUN / "transfer.md").read_text(encoding="utf-8")
        page = render(page, reader, READER_START, READER_END)
    PAGE.write_text(page)
    shutil.copyfile(RUN / "reliability.png", IMAGE)
    print(f"wrote {PAGE.relative_to(ROOT)} and {IMAGE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
