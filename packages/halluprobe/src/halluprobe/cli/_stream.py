"""``halluprobe stream``: its parser and command (split from `halluprobe.cli`, which wires them in)."""

from __future__ import annotations

import math
import sys

from halubench_data import clikit

from halluprobe.cli._inputs import check_detector_arg
from halluprobe.cli._schemas import STREAM, verdict_line


def add_stream_parser(sub) -> None:
    """Adds the ``stream`` sub-command to the ``halluprobe`` parser's sub-parsers ``sub``."""
    p = sub.add_parser(
        "stream", help="score an answer while it arrives, or while the proxy writes it (running probability)"
    )
    from halluprobe.cli._common import DETECTOR_HELP

    p.add_argument("detector", nargs="?", default=None, help=DETECTOR_HELP)
    p.add_argument("--context", required=True, help="the context the answer must be supported by")
    p.add_argument("--question", default="", help="the question the answer replies to (default: none)")
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--answer",
        help="another model's answer to follow: TEXT is fed in chunks of --chunk words; '-' reads stdin "
        "as it arrives (pipe a generator into it)",
    )
    src.add_argument(
        "--generate", action="store_true", help="the proxy writes the answer itself (self-check)"
    )
    p.add_argument(
        "--chunk", type=int, default=None, help="words per chunk when following --answer TEXT (default 4)"
    )
    p.add_argument(
        "--max-new-tokens", type=int, default=None, help="--generate: answer length cap (default 128)"
    )
    p.add_argument("--sample", action="store_true", help="--generate: sample instead of greedy decoding")
    p.add_argument(
        "--temperature", type=float, default=None, help="--generate --sample: temperature (default 1)"
    )
    p.add_argument("--seed", type=int, default=None, help="--generate --sample: random seed (default 0)")
    clikit.add_json_arg(p, STREAM, lines=True)
    clikit.add_device_arg(p)
    clikit.add_autotune_arg(p)


def _stdin_chunks():
    """Text from stdin as it arrives (not line-buffered), decoded incrementally as UTF-8."""
    import codecs
    import os

    decoder = codecs.getincrementaldecoder("utf-8")()
    read = 0
    try:
        while data := os.read(sys.stdin.fileno(), 4096):
            yield decoder.decode(data)
            read += len(data)
        yield decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise clikit.UsageError(
            f"--answer -: stdin is not UTF-8 (near byte {read + exc.start + 1})"
        ) from None


def _updates(args, scorer):
    """The stream of updates that ``halluprobe stream`` prints."""
    from halluprobe.detectors._streaming import stream_text_chunks

    if args.generate:
        yield from scorer.generate(
            args.context, args.question, max_new_tokens=args.max_new_tokens, do_sample=args.sample,
            temperature=args.temperature, seed=args.seed,
        )  # fmt: skip
        return
    follower = scorer.follow(args.context, args.question)
    chunks = _stdin_chunks() if args.answer == "-" else stream_text_chunks(args.answer, args.chunk)
    for chunk in chunks:
        if (update := follower.add(chunk)) is not None:
            yield update
    yield follower.finish()


STREAM_DEFAULTS = {"chunk": 4, "max_new_tokens": 128, "temperature": 1.0, "seed": 0}
"""Defaults of the mode-specific flags (None in the parser, so that an explicit value is seen)."""


def _check_mode_flags(args) -> None:
    """Refuse a flag that the chosen mode would ignore; then fill in the defaults."""
    following_text = not args.generate and args.answer not in (None, "-")
    wrong = [
        ("chunk", following_text, "--answer TEXT"),
        ("max_new_tokens", args.generate, "--generate"),
        ("sample", args.generate, "--generate"),
        ("temperature", args.generate and args.sample, "--generate --sample"),
        ("seed", args.generate and args.sample, "--generate --sample"),
    ]
    for flag, applies, mode in wrong:
        if getattr(args, flag) not in (None, False) and not applies:
            raise clikit.UsageError(f"--{flag.replace('_', '-')} applies to {mode} only")
    for flag, value in STREAM_DEFAULTS.items():
        if getattr(args, flag) is None:
            setattr(args, flag, value)


def cmd_stream(args) -> int:
    """``halluprobe stream``: per-token scores and the running probability of an answer as it arrives."""
    if not args.generate and args.answer is None:
        raise clikit.UsageError("give --answer TEXT (or '-' for stdin) to follow an answer, or --generate")
    _check_mode_flags(args)
    from halubench_data.io import is_unicode

    for flag in ("context", "question", "answer"):
        if not is_unicode(getattr(args, flag) or ""):  # bytes that are not UTF-8 arrive as surrogates
            raise clikit.UsageError(f"--{flag} is not valid Unicode (bytes that are not UTF-8?)")
    if args.chunk < 1 or args.max_new_tokens < 1:
        raise clikit.UsageError("--chunk and --max-new-tokens must be >= 1")
    if not (math.isfinite(args.temperature) and args.temperature > 0):
        raise clikit.UsageError(f"--temperature must be a finite number > 0, got {args.temperature}")
    clikit.check_device_name(args.device)
    check_detector_arg(args.detector)  # all checked before torch loads (the default one too)
    from halluprobe.cli._common import load_detector
    from halluprobe.detectors._streaming import StreamingScorer

    clikit.quiet_transformers()
    device = clikit.resolve_device(args.device)
    clikit.deterministic_kernels(device, args.autotune)
    scorer = StreamingScorer(load_detector(args.detector), device=device)
    last = None
    for u in _updates(args, scorer):
        last = u
        if args.json:
            event = {"event": "tokens", "tokens": u.tokens, "token_ids": u.token_ids,
                     "token_scores": [float(x) for x in u.token_scores], "probability": float(u.probability),
                     "answer_tokens": u.answer_tokens}  # fmt: skip
            clikit.emit_json(event)
        elif u.tokens:
            words = " ".join(f"{t!r}:{x:.2f}" for t, x in zip(u.tokens, u.token_scores, strict=True))
            print(f"p={u.probability:.3f}  {words}", flush=True)
    if last is None:
        raise clikit.UsageError("the answer is empty: nothing to score")
    threshold = scorer.detector.probe_.threshold
    if args.json:
        done = {"event": "done", "probability": float(last.probability), "label": last.label,
                "threshold": threshold, "answer_tokens": last.answer_tokens}  # fmt: skip
        clikit.emit_json(done)
    else:
        print(verdict_line(last.probability, threshold, last.label))
    return 0
