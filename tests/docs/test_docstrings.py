"""Docstrings use the Markdown that mkdocstrings renders: no Sphinx roles, no reST literal-block markers.

A Sphinx role (``:func:`x` ``) shows literally on the API pages; cross-references are written as
``[`x`][package.x]`` (or ``[`package.x`][]``), which the strict docs build checks. A reST ``::`` before an
indented block shows as two colons; a fenced block is used instead.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPHINX_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|obj|exc|const|ref|term):`")
REST_LITERAL = re.compile(r"::\s*$", re.MULTILINE)


def docstring_problems(source: str) -> list[str]:
    """Sphinx roles and reST ``::`` markers in the docstrings of one module's source."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        body = node.body
        docs = [ast.get_docstring(node, clean=False)]
        # attribute docstrings: a string statement right after an assignment
        docs += [b.value.value for a, b in zip(body, body[1:], strict=False)
                 if isinstance(a, ast.Assign | ast.AnnAssign) and isinstance(b, ast.Expr)
                 and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str)]  # fmt: skip
        for doc in filter(None, docs):
            problems += [f"Sphinx role {m.group(0)!r}" for m in SPHINX_ROLE.finditer(doc)]
            problems += ["reST '::' literal marker" for _ in REST_LITERAL.finditer(doc)]
    return problems


def test_checker_finds_roles_and_literal_markers():
    source = '''"""Module, see :func:`f`.

Layout::

    a
"""

X = 1
"""See :class:`~pkg.C`."""


def f():
    """Fine: [`g`][pkg.g], ``code``, a ratio 1:2 and a time 10:30."""
'''
    assert docstring_problems(source) == [
        "Sphinx role ':func:`'",
        "reST '::' literal marker",
        "Sphinx role ':class:`'",
    ]


def test_package_docstrings_are_markdown():
    offenders = {}
    for path in sorted(ROOT.glob("packages/*/src/**/*.py")):
        if problems := docstring_problems(path.read_text()):
            offenders[str(path.relative_to(ROOT))] = problems
    assert offenders == {}
