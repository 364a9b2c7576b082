"""The "Reproduce the paper" page lists every table and figure of the paper, with commands that exist.

Every inline command of the page (a code span starting with ``uv run``, ``python``/``python3`` or ``bash``,
after optional ``VAR=value`` prefixes) is checked: a script it runs exists, each ``--option`` it passes (and
a lowercase value after one, such as ``--phase analyze``) appears in that script, each ``VAR`` it sets is
read by it, each path argument exists, ``NAME:seconds`` arguments of ``run_perf.sh`` name a benchmark, and an
installed command answers ``--help`` for its subcommand with the options used.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "results" / "reproduce.md"
PAPER = ROOT.parent / "shared" / "paper" / "flashattention-with-statistics.txt"
# the paper's tables and figures (its appendix tables included)
PAPER_TABLES = set(range(1, 15))
PAPER_FIGURES = set(range(1, 7))
COMMAND = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(?:uv run|python3?|bash)\s")


def listed(kind: str) -> set[int]:
    """Numbers of the ``kind`` ("Table"/"Figure") rows of the page, ranges such as "Tables 11–12" expanded."""
    out: set[int] = set()
    for first, last in re.findall(rf"^\| {kind}s? (\d+)[a-c]?(?:[–-](\d+))?", PAGE.read_text(), re.M):
        out.update(range(int(first), int(last or first) + 1))
    return out


def test_every_table_and_figure_is_listed():
    assert listed("Table") == PAPER_TABLES
    assert listed("Figure") == PAPER_FIGURES


def test_the_paper_has_no_other_tables_or_figures():
    if not PAPER.is_file():
        return  # the paper lives beside the checkout (../shared/paper); the lists above are checked anyway
    text = PAPER.read_text()
    assert {int(n) for n in re.findall(r"\bTables? (\d+)", text)} <= PAPER_TABLES
    assert {int(n) for n in re.findall(r"\bFigures? (\d+)", text)} <= PAPER_FIGURES


def commands() -> list[str]:
    spans = [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", PAGE.read_text())]
    return [s for s in spans if COMMAND.match(s) and s != "uv run ..."]


def command_problems(command: str) -> list[str]:
    """What is wrong with one command of the page (empty when everything it names exists)."""
    words = shlex.split(command)
    env = []
    while re.fullmatch(r"[A-Z_]+=\S+", words[0]):
        env.append(words.pop(0).split("=")[0])
    if words[:2] == ["uv", "run"]:
        words = words[2:]
    bad = []
    if words[0] in ("python", "python3", "bash"):
        script = ROOT / words[1]
        if not script.is_file():
            return [f"{words[1]}: no such script"]
        text, args = script.read_text(), words[2:]
        bad += [f"{script.name} does not read ${v}" for v in env if v not in text]
        for prev, word in zip(["", *args], args, strict=False):
            if word.startswith("--") and word.split("=")[0] not in text:
                bad.append(f"{script.name} has no option {word}")
            elif prev.startswith("--") and re.fullmatch(r"[a-z_]+", word) and f'"{word}"' not in text:
                bad.append(f"{script.name}: {prev} {word} is not a value it knows")
            elif m := re.fullmatch(r"([a-z_]+):\d+", word):
                if not (ROOT / "benchmarks" / f"{m.group(1)}.py").is_file():
                    bad.append(f"no benchmark benchmarks/{m.group(1)}.py")
            elif "/" in word and not word.startswith("-") and not (ROOT / word).exists():
                bad.append(f"{word}: no such path")
        return bad
    program = str(Path(sys.executable).parent / words[0]) if words[0] != "pytest" else None
    if program is None:
        return [f"{p}: no such path" for p in words[1:] if "/" in p and not (ROOT / p).exists()]
    sub = [words[1]] if len(words) > 1 and re.fullmatch(r"[a-z][a-z-]*", words[1]) else []
    proc = subprocess.run([program, *sub, "--help"], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return [f"`{' '.join([words[0], *sub])} --help` exits {proc.returncode}"]
    return [
        f"{words[0]} {' '.join(sub)} has no option {w}"
        for w in words
        if w.startswith("--") and w not in proc.stdout
    ]


def test_command_checker():
    assert command_problems("python3 benchmarks/kernel_accuracy.py --out benchmarks/results") == []
    assert command_problems("python3 benchmarks/no_such.py") == ["benchmarks/no_such.py: no such script"]
    assert command_problems("NOPE_VAR=1 python3 benchmarks/tier_table.py --nope x/y") == [
        "tier_table.py does not read $NOPE_VAR",
        "tier_table.py has no option --nope",
        "x/y: no such path",
    ]
    assert command_problems("uv run python benchmarks/detection/run.py --phase nope") == [
        "run.py: --phase nope is not a value it knows"
    ]
    assert command_problems("bash benchmarks/run_perf.sh nope:10") == ["no benchmark benchmarks/nope.py"]
    assert command_problems("uv run halubench-data baselines --nope") == [
        "halubench-data baselines has no option --nope"
    ]


def test_page_commands_exist():
    found = commands()
    assert len(found) >= 12 and any("run_perf.sh" in c for c in found)
    assert {c: p for c in found if (p := command_problems(c))} == {}
