"""Feature-set names (``"A7H64"``, ``"GCA7H64"``, ``"ALL"``), parsed without torch or scikit-learn.

A command refuses a bad name before the ML stack loads. `halluprobe.blocks._blocks` re-exports them.
"""

from __future__ import annotations

import re

BLOCK_NAMES: tuple[str, ...] = ("G", "C", "A7", "A64", "H64", "L9")
"""Block names in the canonical order of a feature set (``G``, the text-only grounding block, first, then
``C``, the context contrast)."""

PAPER_BLOCKS: tuple[str, ...] = ("A7", "A64", "H64", "L9")
"""The paper's four blocks: what the feature set ``"ALL"`` names."""


def parse_feature_set(name: str) -> tuple[str, ...]:
    """Split a feature-set name such as ``"A7H64"``, ``"GA7L9"``, ``"GCA7H64"`` or ``"ALL"`` into its blocks.

    ``"ALL"`` is the paper's four blocks (`PAPER_BLOCKS`), without ``G`` or ``C``.

    Raises:
        ValueError: The name is not a concatenation of distinct block names.
    """
    if name == "ALL":
        return PAPER_BLOCKS
    parts = re.findall(r"A64|A7|H64|L9|G|C", name)
    if not parts or "".join(parts) != name or len(set(parts)) != len(parts):
        raise ValueError(
            f"feature set {name!r} is not a concatenation of distinct blocks {BLOCK_NAMES} or 'ALL'"
        )
    return tuple(b for b in BLOCK_NAMES if b in parts)
