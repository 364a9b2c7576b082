"""Leakage-filtered contextual-hallucination datasets, text-only baselines and shared metrics.

Labels everywhere: 1 = hallucinated (the context does not support the answer), 0 = supported.
Scores everywhere: higher means more likely hallucinated.
"""

from .baselines import answer_lengths, length_baseline, text_only_baselines, text_only_scores, tfidf_baseline
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
from .files import atomic_path, atomic_write_bytes, atomic_write_text
from .floors import FLOORS, GroundingFloor, best_floor, floor_scores, grounding_matrix, overlap_scores
from .grounding import (
    GROUNDING_FEATURES,
    STOP_WORDS,
    AnswerWord,
    answer_words,
    grounding_features,
    overlap_score,
    unsupported_char_spans,
)
from .io import RecordError, example_from_dict, example_to_dict, read_jsonl, write_jsonl
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
    C_GRID,
    EvalResult,
    PairedBootstrap,
    auroc,
    best_by_validation,
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
from .select import BUILDERS, BuildOptions, DatasetSpec, load, parse_spec, subsample
from .weights import WeightsNotFoundError, smollm2_gguf

__version__ = "0.1.0"

__all__ = [
    "FLOORS",
    "GroundingFloor",
    "best_floor",
    "floor_scores",
    "grounding_matrix",
    "overlap_scores",
    "GROUNDING_FEATURES",
    "STOP_WORDS",
    "AnswerWord",
    "answer_words",
    "grounding_features",
    "overlap_score",
    "unsupported_char_spans",
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
    "text_only_scores",
    "tfidf_baseline",
    "BUILDERS",
    "C_GRID",
    "SPLITS",
    "BuildOptions",
    "DatasetSpec",
    "WeightsNotFoundError",
    "atomic_path",
    "atomic_write_bytes",
    "best_by_validation",
    "load",
    "parse_spec",
    "smollm2_gguf",
    "subsample",
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
