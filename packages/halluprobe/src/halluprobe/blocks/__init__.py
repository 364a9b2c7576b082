"""The feature blocks a probe reads (A7, A64, H64, L9, G, C) and how A7 and L9 were chosen.

Names are imported on first use: importing this package does not import torch or scikit-learn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from halluprobe import _lazy

if TYPE_CHECKING:
    from halluprobe.blocks._blocks import (
        A7_CANDIDATES,
        A7_SELECTION,
        BLOCK_NAMES,
        L9_CANDIDATES,
        L9_SELECTION,
        A7Block,
        A64Block,
        GBlock,
        H64Block,
        L9Block,
        parse_feature_set,
    )
    from halluprobe.blocks._contrast import CONTRAST_FEATURES, CBlock
    from halluprobe.blocks._induction import induction_scores, rank_heads
    from halluprobe.blocks._selection import Selection, select_a7, select_l9

_EXPORTS = {
    "_blocks": (
        "A7_CANDIDATES",
        "A7_SELECTION",
        "BLOCK_NAMES",
        "L9_CANDIDATES",
        "L9_SELECTION",
        "A7Block",
        "A64Block",
        "GBlock",
        "H64Block",
        "L9Block",
        "parse_feature_set",
    ),
    "_contrast": ("CONTRAST_FEATURES", "CBlock"),
    "_selection": ("Selection", "select_a7", "select_l9"),
    "_induction": ("induction_scores", "rank_heads"),
}

__all__ = [
    "A64Block",
    "CBlock",
    "CONTRAST_FEATURES",
    "GBlock",
    "A7Block",
    "A7_CANDIDATES",
    "A7_SELECTION",
    "BLOCK_NAMES",
    "H64Block",
    "L9Block",
    "L9_CANDIDATES",
    "L9_SELECTION",
    "Selection",
    "induction_scores",
    "parse_feature_set",
    "rank_heads",
    "select_a7",
    "select_l9",
]

__getattr__, __dir__ = _lazy.attach(__name__, _EXPORTS, legacy="_blocks")
