"""Every fenced code block of README.md, the package READMEs and docs/ runs, or says why it cannot.

Blocks are read in page order. A ``python`` block runs in-process, in one namespace per page (a later
block may use what an earlier one defined); a ``bash`` block runs in ``bash -euo pipefail``, where
``uv run CMD`` runs ``CMD`` from this test environment. Both run in a fresh folder beside a ``shared``
link to ``../shared`` of the checkout, so ``../shared/data`` means what it means in the repository and
nothing is written into the repository; a block that reads ``../shared/data`` is skipped when it is
absent.

A block that cannot run here says so on the line right above its fence, with a reason::

    <!-- example: skip: needs a CUDA device -->

A skipped block is still checked: Python must compile; bash must parse (``bash -n``), and every command it
calls (``uv run`` removed) must exist and answer ``--help`` for the subcommand used, so a renamed command
or subcommand fails here. A fence must name its language: ``python`` and ``bash`` run, ``text`` (and data
formats) never do; a fence without a language is an error, so nothing is left unchecked by accident.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
RUN = {"python", "bash"}
NOT_RUN = {"text", "json", "jsonl", "toml", "yaml", "csv", "markdown"}
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[^\s`]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M
)
MARKER = re.compile(r"<!--\s*example:\s*(?P<directive>[a-z]+)\s*(?::\s*(?P<reason>.*?))?\s*-->\s*$")
# programs a skipped bash block may call that are not ours to --help
NOT_CHECKED = {
    "python",
    "python3",
    "bash",
    "sh",
    "pip",
    "cd",
    "export",
    "echo",
    "source",
    "mkdir",
    "rm",
    "cp",
}


@dataclass(frozen=True)
class Block:
    """One fenced code block of one page."""

    page: str
    line: int
    lang: str
    body: str
    skip: str | None  # the reason, when the block is marked as not runnable


def blocks_of(page: str, text: str) -> list[Block]:
    """The fenced blocks of a Markdown page, with their skip markers (errors for malformed markers)."""
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = None
        if marker := MARKER.search(before):
            if marker["directive"] != "skip" or not (marker["reason"] or "").strip():
                raise ValueError(
                    f"{page}:{line}: a marker reads <!-- example: skip: REASON -->, got {before!r}"
                )
            skip = marker["reason"].strip()
        body = textwrap.dedent(m["body"]) if m["indent"] else m["body"]
        out.append(Block(page, line, m["lang"], body, skip))
    return out


def pages() -> list[str]:
    files = [
        ROOT / "README.md",
        *sorted(ROOT.glob("packages/*/README.md")),
        *sorted((ROOT / "docs").rglob("*.md")),
    ]
    return [str(f.relative_to(ROOT)) for f in files]


def test_block_reader_and_markers():
    text = (
        "intro\n\n```python\nx = 1\n```\n\n<!-- example: skip: needs a GPU -->\n```bash\nnvidia-smi\n```\n"
        "- item\n\n  ```text\n  a\n  ```\n"
    )
    got = blocks_of("p.md", text)
    assert [(b.line, b.lang, b.body, b.skip) for b in got] == [
        (3, "python", "x = 1\n", None),
        (8, "bash", "nvidia-smi\n", "needs a GPU"),
        (13, "text", "a\n", None),
    ]
    with pytest.raises(ValueError, match="REASON"):
        blocks_of("p.md", "<!-- example: skip -->\n```bash\nls\n```\n")


def test_every_fence_names_a_language():
    unnamed = [
        f"{b.page}:{b.line} ({b.lang or 'no language'})"
        for page in pages()
        for b in blocks_of(page, (ROOT / page).read_text())
        if b.lang not in RUN | NOT_RUN
    ]
    assert unnamed == []


def command_lines(body: str) -> list[list[str]]:
    """The simple commands of a bash block, without comments, ``VAR=x`` prefixes and ``uv run``."""
    out = []
    for line in body.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token not in (";", "&&", "||", "|", "&"):
                words.append(token)
                continue
            while words and re.fullmatch(r"[A-Za-z_]\w*=\S*", words[0]):
                words = words[1:]
            if words[:2] == ["uv", "run"]:
                words = words[2:]
            if words:
                out.append(words)
            words = []
    return out


def test_command_lines():
    body = (
        "# a; b\nBUDGET=3 uv run halluprobe train --x 1  # c; d\nhf download a \\\n  --local-dir b && ls -l\n"
    )
    assert command_lines(body) == [
        ["halluprobe", "train", "--x", "1"],
        ["hf", "download", "a", "--local-dir", "b"],
        ["ls", "-l"],
    ]


def env() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "NO_COLOR": "1"}


@functools.cache
def help_exit(program: str, sub: str | None) -> tuple[int, str]:
    path = shutil.which(program, path=env()["PATH"])
    if path is None:
        return 127, f"{program}: not on PATH"
    argv = [path, *([sub] if sub else []), "--help"]
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=env(), timeout=300, stdin=subprocess.DEVNULL
    )
    return proc.returncode, (proc.stdout + proc.stderr)[-2000:]


def check_skipped(block: Block) -> None:
    where = f"{block.page}:{block.line}"
    if block.lang == "python":
        compile(block.body, where, "exec")
        return
    proc = subprocess.run(["bash", "-n", "-c", block.body], capture_output=True, text=True)
    assert proc.returncode == 0, f"{where}: bash cannot parse the block: {proc.stderr}"
    for words in command_lines(block.body):
        if words[0] in NOT_CHECKED:
            continue
        sub = words[1] if len(words) > 1 and re.fullmatch(r"[a-z][a-z0-9-]*", words[1]) else None
        code, output = help_exit(words[0], sub)
        assert code == 0, (
            f"{where}: `{' '.join([words[0], *([sub] if sub else [])])} --help` exits {code}: {output}"
        )


def run_python(block: Block, namespace: dict) -> None:
    code = compile(block.body, f"{block.page}:{block.line}", "exec")
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, namespace)


def run_bash(block: Block, cwd: Path) -> None:
    prelude = (
        'uv() { if [ "$1" = run ]; then shift; "$@"; else echo "only uv run here" >&2; return 2; fi; }\n'
    )
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", prelude + block.body], cwd=cwd, env=env(),
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)  # fmt: skip
    assert proc.returncode == 0, f"{block.page}:{block.line} exits {proc.returncode}:\n{proc.stderr[-3000:]}"


SLOW_PAGES = {
    "docs/guide/kernels.md",
    "docs/api/halluprobe.md",
    "packages/flashstats-hf/README.md",
    "docs/reference/datasets.md",
    "docs/guide/cli-conventions.md",
    "docs/guide/distributed.md",
}
"""Pages whose examples take long on 2 CPU cores (Inductor compiles a call on the CPU; several commands that
each start Python with torch; training and scoring a proxy over dozens of examples); CI runs them. The default
run covers the same fullgraph compile with the aot_eager backend (test_library.py), the CLI conventions and
datasets in tests/halubench_data and tests/workspace/test_cli_grammar.py, distributed extraction in
tests/halluprobe/test_distributed.py, record_forward in tests/flashstats_hf, and `halluprobe.train` and
`Detector` on a tiny proxy in tests/halluprobe."""


@pytest.mark.parametrize(
    "page",
    [
        p if p not in SLOW_PAGES else pytest.param(p, marks=pytest.mark.slow)
        for p in pages()
        if any(b.lang in RUN for b in blocks_of(p, (ROOT / p).read_text()))
    ],
)
def test_page_examples(page, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED)
    monkeypatch.chdir(work)
    page_module = types.ModuleType("__docs_example__")  # a real module, as a user's script is
    monkeypatch.setitem(sys.modules, page_module.__name__, page_module)  # Dynamo looks functions up there
    namespace = page_module.__dict__
    missing_data = []
    for block in blocks_of(page, (ROOT / page).read_text()):
        if block.lang not in RUN:
            continue
        if block.skip is not None:
            check_skipped(block)
        elif "../shared/data" in block.body and not SHARED.is_dir():
            missing_data.append(block.line)
        elif block.lang == "python":
            run_python(block, namespace)
        else:
            run_bash(block, work)
    if missing_data:
        pytest.skip(f"{page}: blocks at lines {missing_data} read ../shared/data, which is absent")


@pytest.mark.parametrize(
    "body",
    ["no-such-program-here build x\n", "halubench-data no-such-command x\n", "if then\n"],
    ids=str.strip,
)
def test_skipped_block_checks_fail_on_unknown_commands(body):
    with pytest.raises(AssertionError):
        check_skipped(Block("p.md", 1, "bash", body, "a reason"))


def test_skipped_block_check_passes_a_real_command():
    check_skipped(Block("p.md", 1, "bash", "uv run halubench-data stats rtqa.jsonl  # counts\n", "a reason"))
