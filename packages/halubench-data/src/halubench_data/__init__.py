"""Leakage-filtered contextual-hallucination datasets, text-only baselines and shared metrics.

Labels everywhere: 1 = hallucinated (the context does not support the answer), 0 = supported.
Scores everywhere: higher means more likely hallucinated.
"""

from .dataset import Dataset, Drop, LoadReport, concat
from .io import RecordError, atomic_write_text, example_from_dict, example_to_dict, read_jsonl, write_jsonl
from .schema import SPLITS, Example, Span, Split

__version__ = "0.1.0"

__all__ = [
    "SPLITS",
    "Dataset",
    "Drop",
    "Example",
    "LoadReport",
    "RecordError",
    "Span",
    "Split",
    "atomic_write_text",
    "concat",
    "example_from_dict",
    "example_to_dict",
    "read_jsonl",
    "write_jsonl",
]
