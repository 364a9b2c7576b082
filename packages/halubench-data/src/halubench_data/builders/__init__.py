"""Builders: each reads local files (a path) and returns a split, grouped ``Dataset`` with a report."""

from .claims import (
    NEUTRAL_QUESTION,
    build_claims,
    build_claimverify,
    build_expertqa,
    build_lfqa,
    build_wice,
    claim_example,
    supported_to_label,
)
from .faithbench import build_faithbench
from .halubench import (
    PHANTOM_10K_2000,
    PHANTOM_FIELDS,
    TRIVIA_PLUS_FIELDS,
    build_halubench,
    build_phantom,
    build_trivia_plus,
    halubench_from_hub_rows,
    load_halubench_from_hub,
    phantom_file,
)
from .ragtruth import TASKS, build_ragtruth, build_ragtruth_original
from .tabular import FieldMap, parse_label

__all__ = [
    "NEUTRAL_QUESTION",
    "PHANTOM_10K_2000",
    "PHANTOM_FIELDS",
    "TASKS",
    "TRIVIA_PLUS_FIELDS",
    "FieldMap",
    "build_claims",
    "build_claimverify",
    "build_expertqa",
    "build_lfqa",
    "build_wice",
    "build_faithbench",
    "build_halubench",
    "build_phantom",
    "build_ragtruth",
    "build_ragtruth_original",
    "build_trivia_plus",
    "claim_example",
    "halubench_from_hub_rows",
    "load_halubench_from_hub",
    "parse_label",
    "phantom_file",
    "supported_to_label",
]
