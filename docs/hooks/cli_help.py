"""MkDocs hook: put the ``--help`` of a command-line tool into a page while the site is built.

A line ``<!-- cli-help: MODULE -->`` (for example ``halluprobe.cli``) becomes the help of the tool whose
parser ``MODULE.build_parser()`` returns, then the help of each of its subcommands, each in a text block
under its own heading, followed by the keys of the command's ``--json`` output (the schema that
``halubench_data.clikit.add_json_arg`` attached and that every document written is checked against).
The parsers import nothing heavy, so the build stays fast, and the page can never disagree with the
tool.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re

_MARKER = re.compile(r"^<!--\s*cli-help:\s*([\w.]+)\s*-->\s*$", re.MULTILINE)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse offers no public way to list subcommands
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cli_reference(module: str) -> str:
    """Markdown with the help of ``module.build_parser()`` and of each of its subcommands.

    Args:
        module: Dotted name of a module with a ``build_parser()`` function.

    Returns:
        Headings and ``text`` blocks, widths fixed at 100 columns.
    """
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal width; fix it for the page
    parser = importlib.import_module(module).build_parser()
    parts = [f"### `{parser.prog}`\n\n```text\n{parser.format_help().rstrip()}\n```\n"]
    for name, sub in _subparsers(parser).items():
        parts.append(f"### `{parser.prog} {name}`\n\n```text\n{sub.format_help().rstrip()}\n```\n")
        schema = sub.get_default("json_schema")
        if schema is not None:
            form = "one JSON object per line (keys by event)" if schema.lines else "one JSON document"
            rows = "\n".join(f"| `{key}` | {_cell(text)} |" for key, text in schema.fields.items())
            parts.append(f"`--json` prints {form}:\n\n| key | meaning |\n|---|---|\n{rows}\n")
    return "\n".join(parts)


def _cell(text: str) -> str:
    """``text`` safe in a Markdown table cell: pipes escaped, ``{...}`` shapes as code."""
    return re.sub(r"(\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}|\[\{[^\]]*\])", r"`\1`", text.replace("|", "\\|"))


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: D103 (MkDocs hook signature)
    return _MARKER.sub(lambda m: cli_reference(m.group(1)), markdown)
