"""The ``halluprobe`` argument parser: every command's flags, built without importing torch.

`halluprobe.cli._main` runs the commands; this module only declares them (so ``--help`` is fast).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from halubench_data import clikit

from halluprobe.cli import _schemas as schemas
from halluprobe.cli._common import DETECTOR_HELP
from halluprobe.cli._finetune import add_finetune_parser
from halluprobe.cli._general import add_general_args
from halluprobe.cli._serve import add_serve_parser
from halluprobe.cli._stream import add_stream_parser
from halluprobe.cli._transfer import add_transfer_parser

DEFAULT_FEATURE_SETS = ("A7", "A64", "H64", "L9", "A7H64", "A64H64", "A7L9", "H64L9")
"""Feature sets that ``halluprobe train`` fits when ``--feature-sets`` is not given."""
DEFAULT_OUT = "runs/default"
DEFAULT_TOKEN_BUDGET = 16384
"""Tokens per proxy forward (``--token-budget``): batches are packed up to it."""
DEFAULT_TRAIN_LIMIT = clikit.AUTO_LIMIT
"""Examples per split used by ``--limit auto`` on the default dataset (keeps ``train`` under 10 minutes)."""


def _add_data_args(p: argparse.ArgumentParser, *, proxy: bool = True, several: bool = False) -> None:
    """Dataset, device and batching options; ``proxy``: also --proxy, --layers and --graphs.

    ``evaluate`` has no proxy options: its saved detector fixes the proxy and layers and runs eager
    batches, so they would only be refused. ``several``: ``--dataset`` may repeat (``train --general``).
    """
    clikit.add_dataset_arg(p, several="with --general" if several else None)
    clikit.add_limit_arg(p)
    if proxy:
        p.add_argument(
            "--proxy", default=None, help="proxy model: hub id, folder or .gguf (default: SmolLM2-135M)"
        )
        p.add_argument("--layers", default=None, help="scored layers, e.g. '0-11' or '3,5,7' (default: all)")
    clikit.add_device_arg(p)
    clikit.add_autotune_arg(p)
    clikit.add_batch_size_arg(p, "most examples per proxy forward")
    p.add_argument(
        "--token-budget", type=int, default=DEFAULT_TOKEN_BUDGET,
        help="most tokens per proxy forward: examples sorted by length are packed up to it (a longer "
        f"example runs alone; default {DEFAULT_TOKEN_BUDGET})",
    )  # fmt: skip
    if proxy:
        p.add_argument(
            "--graphs", action="store_true",
            help="CUDA only: replay each example's forward from a CUDA graph (buckets of 128 tokens / 64 "
            "answer tokens) instead of eager batches; same records, less host time",
        )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The ``halluprobe`` argument parser (no heavy imports)."""
    from halluprobe.features._token_data import TOKEN_VIEWS

    parser = clikit.make_parser(
        "halluprobe",
        "Hallucination detectors on proxy-model attention statistics, hidden states and logits.",
        dist="halluprobe",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("extract", help="run the proxy over a dataset and cache per-example records")
    _add_data_args(p)
    clikit.add_out_arg(
        p, "the run folder; the feature cache goes to OUT/cache", default=DEFAULT_OUT, overwrite=False
    )
    p.add_argument("--toha", action="store_true", help="also materialise response blocks for TOHA (slower)")
    clikit.add_json_arg(p, schemas.EXTRACT)
    p = sub.add_parser("train", help="fit feature-set probes and detectors; write a report and detectors")
    _add_data_args(p, several=True)
    clikit.add_out_arg(
        p, "the report, results.json and detectors/ (the feature cache in OUT/cache)", default=DEFAULT_OUT
    )
    p.add_argument(
        "--feature-sets",
        default=None,
        help="comma-separated feature sets from the blocks G (text grounding), C (context contrast: a second "
        "forward without the context), A7, A64, H64, L9 (e.g. A7H64, GA7L9, GCA7H64) or ALL (the paper's "
        f"four; default {','.join(DEFAULT_FEATURE_SETS)}); with --general the candidates, where O+SET mixes "
        "the zero-fit overlap score with a probe of SET (default "
        "O+CA7H64,O+CH64,O+C,O+A7H64,O+H64,O+A7,GCA7H64,GA7L9,GH64,GA7H64,GA64H64,GA7H64L9,GA64H64L9)",
    )
    p.add_argument("--toha", action="store_true", help="also fit TOHA (materialises response blocks; slower)")
    p.add_argument(
        "--token-probe", action="store_true",
        help="also fit a token probe on the dataset's annotated spans (localisation: token AUROC and "
        "character span F1 in results.json); every saved detector carries it and `predict --spans` uses it",
    )  # fmt: skip
    p.add_argument(
        "--token-view", default="mean+hidden", choices=TOKEN_VIEWS,
        help="the token probe's per-token features: attention statistics averaged over heads (mean) or of "
        "every head (heads), with the middle layer's hidden state (+hidden); logit statistics always "
        "(default mean+hidden)",
    )  # fmt: skip
    p.add_argument(
        "--token-cv", type=int, default=0, metavar="FOLDS",
        help="choose the token probe's C, context window, decoding and threshold by FOLDS-fold group "
        "cross-validation over the training and validation answers, then fit it on both (default 0: "
        "fit on train, choose on validation)",
    )  # fmt: skip
    p.add_argument(
        "--no-published", action="store_true", help="skip the published detectors (Lookback Lens, ...)"
    )
    for block in ("a7", "l9"):
        p.add_argument(
            f"--{block}-selection", default=None, metavar="FILE",
            help=f"{block.upper()} features from a `halluprobe select-{block}` JSON (default: the packaged "
            "selection, halluprobe/blocks/selections/" + f"{block}.json)",
        )  # fmt: skip
    add_general_args(p)
    clikit.add_json_arg(p, schemas.TRAIN)
    for block, n, what in (("A7", 7, "attention"), ("L9", 9, "logit")):
        p = sub.add_parser(
            f"select-{block.lower()}",
            help=f"choose {block}'s {n} {what} features once by grouped 5-fold CV on a training split "
            f"(paper Appendix L.1); writes a selection JSON for train --{block.lower()}-selection",
        )
        _add_data_args(p)
        clikit.add_out_arg(
            p,
            f"the selection OUT/{block.lower()}.json (the feature cache in OUT/cache)",
            default="runs/select",
        )
        p.add_argument(
            "--split", default="train", choices=("train", "validation", "test"),
            help="split the features are chosen on (default train)",
        )  # fmt: skip
        p.add_argument("--n-features", type=int, default=n, help=f"features kept (default {n})")
        clikit.add_json_arg(p, schemas.SELECT)
    p = sub.add_parser(
        "evaluate", help="score a dataset split with a saved detector",
        description="Score a dataset split with a saved detector at its threshold. The detector fixes "
        "the proxy and the layers (no --proxy, --layers or --graphs).",
    )  # fmt: skip
    _add_data_args(p, proxy=False)
    p.add_argument("detector", help="folder of a saved detector (e.g. runs/default/detectors/A7H64)")
    p.add_argument(
        "--split",
        default="test",
        choices=("train", "validation", "test"),
        help="split to score (default test)",
    )
    clikit.add_out_arg(p, "the feature cache OUT/cache", default="runs/evaluate", overwrite=False)
    clikit.add_json_arg(p, schemas.EVALUATE)
    p = sub.add_parser(
        "predict", help="score one (context, question, answer) triple, or a JSONL file of them (--input)"
    )
    p.add_argument("detector", nargs="?", default=None, help=DETECTOR_HELP)
    p.add_argument("--context", help="the context (with --answer; or use --input)")
    p.add_argument("--question", help="the question the answer replies to (default: none)")
    p.add_argument("--answer", help="the answer to check")
    p.add_argument(
        "--input", type=Path, metavar="JSONL",
        help="a file of JSON lines with 'context', 'answer' and optional 'question' and 'id': the proxy is "
        "loaded once and the answers scored in batches",
    )  # fmt: skip
    p.add_argument(
        "--batch-size", type=int, default=None, metavar="N",
        help=f"answers per proxy forward with --input (default {clikit.DEFAULT_BATCH_SIZE})",
    )  # fmt: skip
    clikit.add_device_arg(p)
    clikit.add_autotune_arg(p)
    p.add_argument(
        "--threshold", default=None, metavar="T",
        help="what the labels and spans follow: a probability in [0, 1], or 'expected-f1' with --input (the "
        "threshold that maximises the file's expected F1 under its own probabilities, no labels needed: "
        "give it answers of one source, at least 20) (default: the detector's threshold)",
    )  # fmt: skip
    p.add_argument("--tokens", action="store_true", help="also print the per-token scores")
    p.add_argument(
        "--spans", action="store_true", help="also print the answer's predicted hallucinated spans"
    )
    clikit.add_json_arg(p, schemas.PREDICT, lines=True)
    add_stream_parser(sub)
    add_transfer_parser(sub)
    add_finetune_parser(sub)
    add_serve_parser(sub)
    return parser
