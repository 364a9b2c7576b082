"""The CLI pages name every command that the parsers have (the option reference itself is generated)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _commands(module: str) -> list[str]:
    parser = __import__(module, fromlist=["build_parser"]).build_parser()
    return list(parser._subparsers._group_actions[0].choices)  # noqa: SLF001


def test_halluprobe_page_has_every_command_in_its_synopsis_and_a_section():
    text = (DOCS / "guide" / "cli.md").read_text()
    synopsis = re.search(r"```text\nhalluprobe ([^\n]+)\n```", text)
    assert synopsis is not None
    commands = _commands("halluprobe.cli")
    assert [c.strip() for c in synopsis.group(1).split("|")] == commands
    headings = " ".join(re.findall(r"^#+ .*$", text, re.MULTILINE))
    missing = [c for c in commands if f"`halluprobe {c}" not in headings]
    assert not missing, f"docs/guide/cli.md has no section for {missing}"


@pytest.mark.parametrize("module", ["halluprobe.cli", "halujudge.cli", "halubench_data.cli"])
def test_reference_page_generates_every_tool(module):
    assert f"<!-- cli-help: {module} -->" in (DOCS / "guide" / "cli-conventions.md").read_text()


def test_predict_json_example_has_the_documented_keys():
    import json

    from halluprobe.cli._schemas import PREDICT

    text = (DOCS / "guide" / "cli.md").read_text()
    (example,) = re.findall(r'^`(\{"id": .*\})`$', text, re.MULTILINE)
    assert list(json.loads(example)) == [k for k in PREDICT if k != "error"]  # a scored line
    assert '`{"id": ..., "error": ...}`' in text  # a line that was not scored


def _help_texts(parser) -> list[str]:
    """Every description and help string of a parser and its sub-commands."""
    import argparse

    texts = [parser.description or ""]
    for action in parser._actions:  # noqa: SLF001
        texts.append(action.help or "")
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            texts += [choice.help or "" for choice in action._choices_actions]  # noqa: SLF001
            for sub in action.choices.values():
                texts += _help_texts(sub)
    return texts


@pytest.mark.parametrize("module", ["halluprobe.cli", "halujudge.cli", "halubench_data.cli"])
def test_no_help_text_shows_an_unformatted_placeholder(module):
    """A help string written without its ``f`` prints ``{name}`` literally (so would the reference page)."""
    parser = __import__(module, fromlist=["build_parser"]).build_parser()
    found = [t for t in _help_texts(parser) if re.search(r"\{[A-Za-z_][\w.()]*\}", t)]
    assert not found, found
