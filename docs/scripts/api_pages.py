"""Write the curated API pages ``docs/api/<package>.md``: the entry points first, grouped by task.

Each page lists its groups of public names in reading order (entry points, result types, helpers);
a last block renders every other public name of the package (under "Other public names" when there
are some at generation time), so an export added later still appears. Run from the repository root after
changing a group: ``uv run python docs/scripts/api_pages.py``.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PAGES: dict[str, tuple[str, list[tuple[str, list[str]]]]] = {
    "flashstats_kernels": (
        "Triton kernels with a torch-only API: attention of the response rows with T1-T3 statistics.",
        [
            ("Attention with statistics", ["response_attention", "StatsRequest", "AttentionResult"]),
            ("T2 lookups and T3 column sums after any forward", ["response_lookups", "response_columns"]),
            ("Statistic types", ["RowStats", "LookupStats", "ColumnStats"]),
            ("Packed batches", ["response_attention_varlen"]),
            (
                "Decoding with a KV cache",
                [
                    "decode_attention",
                    "RowState",
                    "ColumnState",
                    "row_state",
                    "merge_states",
                    "finalize_state",
                ],
            ),
            (
                "Features from statistics",
                ["lookback_ratio", "bos_sink_rate", "topk_sink_rate", "visible_key_counts", "first_real_key"],
            ),
            (
                "T4 dense and the fp64 reference",
                ["dense_response_block", "dense_statistics", "row_topk_mass", "naive_response_attention"],
            ),
        ],
    ),
    "flashstats_hf": (
        'The Transformers integration: the `"attnstats"` attention, recorded forwards, CUDA graphs.',
        [
            (
                "Recording a forward",
                ["record_forward", "ForwardStats", "DEFAULT_REQUEST", "load_model", "DEFAULT_MODEL"],
            ),
            ("Inputs", ["format_example", "collate", "Batch"]),
            ("CUDA graphs", ["GraphedRecorder", "PooledStats", "GraphedDecodeStep"]),
            ("Generation and streamed answers", ["CachedRecorder"]),
            ("Logit statistics", ["logit_statistics", "LOGIT_STAT_NAMES"]),
            (
                "The attention backend",
                [
                    "ATTN_IMPLEMENTATION",
                    "register_flashstats",
                    "flashstats_attention_forward",
                    "flashstats_mask",
                ],
            ),
        ],
    ),
    "halluprobe": (
        "Features, published detectors, probe training and evaluation (CLI `halluprobe`).",
        [
            ("Saved detectors", ["Detector", "Prediction", "PredictedSpan", "load"]),
            ("The fine-tuned reader", ["Reader"]),
            ("A general detector from several sources", ["train_general", "fit_general", "GeneralFit"]),
            (
                "Extraction",
                [
                    "ProxyExtractor",
                    "extract_records",
                    "plan_batches",
                    "reduce_forward",
                    "ExampleRecord",
                    "FeatureCache",
                    "fill_grounding",
                ],
            ),
            ("Data-parallel extraction", ["World", "init_world", "shard_batches"]),
            (
                "The probe protocol",
                [
                    "train_feature_sets",
                    "fit_blocks",
                    "ProbeFit",
                    "parse_feature_set",
                    "select_heads",
                    "select_sink_count",
                    "rank_heads",
                    "induction_scores",
                ],
            ),
            ("Feature blocks", ["GBlock", "CBlock", "A7Block", "A64Block", "H64Block", "L9Block"]),
            (
                "Published detectors",
                ["LookbackLens", "SinkProbe", "LLMCheckAttention", "INTRYGUE", "RAUQ", "TOHA", "mtopdiv"],
            ),
        ],
    ),
    "halujudge": ("LLM-judge, MiniCheck and HHEM baselines (CLI `halujudge`).", []),
    "halubench_data": (
        "Leakage-filtered dataset builders, the embedded default set, metrics (CLI `halubench-data`).",
        [],
    ),
}


# methods that the attention function calls on the active recorder: a protocol between modules of the
# package, not something a user calls, so the pages leave them out
INTERNAL_MEMBERS = {"flashstats_hf.CachedRecorder": ("wants", "matches", "score_cached")}


def public_names(module: str) -> list[str]:
    """The package's ``__all__``, read statically (nothing is imported)."""
    import griffe

    paths = [str(p) for p in (ROOT / "packages").glob("*/src")]
    return [str(name) for name in griffe.load(module, search_paths=paths).exports or []]


def page(module: str, intro: str, groups: list[tuple[str, list[str]]]) -> str:
    """The Markdown of one API page."""
    out = [f"# {module}", "", intro, ""]
    listed = [name for _, names in groups for name in names]
    for title, names in groups:
        out += [f"## {title}", ""]
        for name in names:
            out += [
                f"::: {module}.{name}",
                "    options:",
                "      show_root_heading: true",
                "      heading_level: 3",
            ]
            if hidden := INTERNAL_MEMBERS.get(f"{module}.{name}"):
                out += ["      filters:", '        - "!^_[^_]"', f'        - "!^({"|".join(hidden)})$"']
            out += [""]
    if set(public_names(module)) - set(listed):
        out += ["## Other public names", ""]
    exclude = "|".join(listed)
    out += [f"::: {module}", "    options:", "      show_root_heading: false"]
    out += ["      show_root_toc_entry: false", "      heading_level: 3"]
    if listed:
        out += [
            "      show_docstring_description: false",
            "      filters:",
            '        - "!^_[^_]"',
            f'        - "!^({exclude})$"',
        ]
    return "\n".join(out) + "\n"


def main() -> None:
    """Write every page."""
    for module, (intro, groups) in PAGES.items():
        (ROOT / "docs" / "api" / f"{module}.md").write_text(page(module, intro, groups))


if __name__ == "__main__":
    main()
