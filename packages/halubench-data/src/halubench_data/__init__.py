"""Leakage-filtered contextual-hallucination datasets, text-only baselines and shared metrics.

Labels everywhere: 1 = hallucinated (the context does not support the answer), 0 = supported.
Scores everywhere: higher means more likely hallucinated.
"""

from .baselines import answer_lengths, length_baseline, text_only_baselines, tfidf_baseline
from .builders import (
    FieldMap,
    build_claims,
    build_faithbench,
    build_halubench,
    build_phantom,
    build_ragtruth,
    build_ragtruth_original,
    build_trivia_plus,
    halubench_from_hub_rows,
    load_halubench_from_hub,
    supported_to_label,
)
from .dataset import Dataset, Drop, LoadReport, concat
from .default import build_default
from .io import RecordError, atomic_write_text, example_from_dict, example_to_dict, read_jsonl, write_jsonl
from .leakage import (
    UnionFind,
    assign_splits,
    balance_lengths,
    filings_linked,
    link_groups,
    long_numbers,
    ngram_share,
    word_jaccard,
    word_ngrams,
)
from .metrics import (
    EvalResult,
    PairedBootstrap,
    auroc,
    evaluate,
    f1_at,
    holm,
    markdown_table,
    paired_bootstrap,
    precision_recall_f1,
    results_table,
    select_threshold,
)
from .schema import SPLITS, Example, Span, Split

__version__ = "0.1.0"

__all__ = [
    "FieldMap",
    "build_claims",
    "build_faithbench",
    "build_halubench",
    "build_phantom",
    "build_ragtruth",
    "build_ragtruth_original",
    "build_trivia_plus",
    "halubench_from_hub_rows",
    "load_halubench_from_hub",
    "supported_to_label",
    "UnionFind",
    "assign_splits",
    "balance_lengths",
    "filings_linked",
    "link_groups",
    "long_numbers",
    "ngram_share",
    "word_jaccard",
    "word_ngrams",
    "answer_lengths",
    "build_default",
    "length_baseline",
    "text_only_baselines",
    "tfidf_baseline",
    "SPLITS",
    "Dataset",
    "Drop",
    "EvalResult",
    "Example",
    "LoadReport",
    "PairedBootstrap",
    "RecordError",
    "Span",
    "Split",
    "atomic_write_text",
    "auroc",
    "concat",
    "evaluate",
    "example_from_dict",
    "example_to_dict",
    "f1_at",
    "holm",
    "markdown_table",
    "paired_bootstrap",
    "precision_recall_f1",
    "read_jsonl",
    "results_table",
    "select_threshold",
    "write_jsonl",
]
