"""``halluprobe serve``: its parser and command (split from `halluprobe.cli`, which wires them in)."""

from __future__ import annotations

import os

from halubench_data import clikit

from halluprobe.cli._schemas import SERVE

TOKEN_ENV = "HALLUPROBE_SERVE_TOKEN"
"""Environment variable read once at start for the bearer token when ``--token`` is not given."""


def add_serve_parser(sub) -> None:
    """Adds the ``serve`` sub-command to the ``halluprobe`` parser's sub-parsers ``sub``."""
    from halluprobe.serving.config import MAX_WAIT_MS_LIMIT, ServeConfig

    d = ServeConfig()
    p = sub.add_parser(
        "serve", help="serve a detector over HTTP: POST /v1/score, a stream WebSocket and a page at /",
        description="Serve a detector over HTTP on 127.0.0.1 (loopback) unless --host says otherwise. "
        "Answers that arrive together share one proxy forward. Needs the halluprobe[serve] extra.",
    )  # fmt: skip
    p.add_argument(
        "detector", nargs="?", default=None,
        help="folder of a saved detector (default: the packaged detector, where this halluprobe has one)",
    )  # fmt: skip
    p.add_argument(
        "--host", default="127.0.0.1",
        help="IP address to bind (default 127.0.0.1: this machine only; 0.0.0.0: every interface)",
    )  # fmt: skip
    p.add_argument(
        "--port", type=int, default=8000, help="port (default 8000; 0 picks a free one, which --json prints)"
    )
    p.add_argument(
        "--token", default=None,
        help=f"bearer token that /v1/* requires (default: ${TOKEN_ENV} when set, else no token)",
    )  # fmt: skip
    p.add_argument("--max-wait-ms", type=float, default=d.max_wait_ms,
                   help=f"how long a forward waits for more answers, 0 to {MAX_WAIT_MS_LIMIT:g} "
                   f"(default {d.max_wait_ms:g})")  # fmt: skip
    p.add_argument("--max-batch", type=int, default=d.max_batch,
                   help=f"most answers per proxy forward (default {d.max_batch})")  # fmt: skip
    p.add_argument("--max-queue", type=int, default=d.max_queue,
                   help=f"most answers queued, beyond it 503 (default {d.max_queue})")  # fmt: skip
    p.add_argument("--max-items", type=int, default=d.max_items,
                   help=f"most answers per request (default {d.max_items})")  # fmt: skip
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes,
                   help=f"largest request body, and most bytes of a stream's messages (default "
                   f"{d.max_body_bytes})")  # fmt: skip
    p.add_argument("--max-streams", type=int, default=d.max_streams,
                   help=f"most open /v1/stream connections (default {d.max_streams})")  # fmt: skip
    p.add_argument("--header-timeout", type=float, default=d.header_timeout_s,
                   help=f"seconds to send a request's headers (default {d.header_timeout_s:g})")  # fmt: skip
    p.add_argument("--body-timeout", type=float, default=d.body_timeout_s,
                   help=f"seconds to send a request's body (default {d.body_timeout_s:g})")  # fmt: skip
    p.add_argument("--stream-idle-timeout", type=float, default=d.stream_idle_s,
                   help=f"seconds a stream waits for a message (default {d.stream_idle_s:g})")  # fmt: skip
    p.add_argument("--max-tokens", type=int, default=None,
                   help="most tokens per example; a longer one gets a 'too_long' error of its own "
                   "(default: the proxy's position limit)")  # fmt: skip
    clikit.add_json_arg(p, SERVE)
    clikit.add_device_arg(p)
    clikit.add_autotune_arg(p)


def load_served_detector(path: str | None):
    """The detector at ``path``; with no path, the packaged one (``halluprobe.load()``)."""
    from halluprobe.cli._common import load_detector

    return load_detector(path)


def _config(args, token: str | None):
    """The `ServeConfig` of the flags, or `clikit.UsageError` naming the flag."""
    from halluprobe.serving.config import ServeConfig

    for flag in ("max_batch", "max_queue", "max_items", "max_body_bytes", "max_streams"):
        if getattr(args, flag) < 1:
            raise clikit.UsageError(f"--{flag.replace('_', '-')} must be >= 1")
    if not 0 <= args.port <= 65535:
        raise clikit.UsageError(f"--port must be in 0..65535, got {args.port}")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise clikit.UsageError("--max-tokens must be >= 1")
    try:
        return ServeConfig(
            token=token, max_wait_ms=args.max_wait_ms, max_batch=args.max_batch, max_queue=args.max_queue,
            max_items=args.max_items, max_body_bytes=args.max_body_bytes, max_streams=args.max_streams,
            header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout,
            stream_idle_s=args.stream_idle_timeout,
        )  # fmt: skip
    except ValueError as exc:  # "ServeConfig.max_wait_ms must be ..." -> "--max-wait-ms must be ..."
        names = {"header_timeout_s": "header-timeout", "body_timeout_s": "body-timeout",
                 "stream_idle_s": "stream-idle-timeout"}  # fmt: skip
        text = str(exc).removeprefix("ServeConfig.")
        field = text.split(" ")[0]
        raise clikit.UsageError(
            f"--{names.get(field, field.replace('_', '-'))}{text[len(field) :]}"
        ) from None


def cmd_serve(args) -> int:
    """``halluprobe serve``: run the HTTP server until interrupted (requests in flight are finished).

    Every flag, the detector's files and the address are checked, and the port bound, before torch
    and the proxy load: a refusal comes at once.
    """
    from halluprobe.cli._inputs import check_detector_arg

    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    config = _config(args, token)
    clikit.check_device_name(args.device)
    check_detector_arg(args.detector)
    try:
        import uvicorn  # noqa: F401 (the extra)

        from halluprobe.serving.server import bind, serve, url_of
    except ImportError as exc:
        raise clikit.UsageError(
            f"halluprobe serve needs the serve extra: pip install 'halluprobe[serve]' ({exc})"
        ) from None
    try:
        sock = bind(args.host, args.port)
    except ValueError as exc:
        raise clikit.UsageError(str(exc)) from None
    with sock:
        from halluprobe.serving import ScoringService, create_app

        clikit.quiet_transformers()
        device = clikit.resolve_device(args.device)
        clikit.deterministic_kernels(device, args.autotune)
        detector = load_served_detector(args.detector)
        service = ScoringService(detector, device=device, max_tokens=args.max_tokens)
        url = url_of(sock)
        clikit.status(f"serving {detector.source or 'the packaged detector'} on {url}")
        if args.json:
            clikit.emit_json({"url": url, "detector": args.detector})
        serve(create_app(service, config), sock, config)
    return 0
