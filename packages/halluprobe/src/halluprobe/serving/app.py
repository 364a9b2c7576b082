"""The ASGI app of ``halluprobe serve`` (FastAPI): each route translates HTTP to one library call.

Routes: ``POST /v1/score`` (through the [`BatchQueue`][halluprobe.serving.BatchQueue]), the WebSocket
``/v1/stream``, ``GET /healthz``, ``GET /v1/detector``, ``GET /openapi.json`` and the page at ``/``.
Refusals are one line of JSON, ``{"error": ...}``, with a 4xx status (503 with ``Retry-After`` when
the queue is full).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

from fastapi import FastAPI, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from halluprobe._threshold import check_threshold, parse_threshold
from halluprobe.serving.batching import BatchQueue, QueueClosed, QueueFull
from halluprobe.serving.config import ServeConfig
from halluprobe.serving.schemas import (
    DetectorCard,
    ErrorResponse,
    Health,
    ItemError,
    ScoreItem,
    ScoreResponse,
    StreamChunk,
    StreamEvent,
    StreamStart,
)
from halluprobe.serving.service import PendingScore, ScoringService, stream_event


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class _BodyLimit:
    """Refuses a request body over ``limit`` bytes with 413, before the route reads it."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        too_big = _error(413, f"request body over {self.limit} bytes")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await too_big(scope, receive, send)
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await too_big(scope, receive, send)


class _TooLarge(Exception):
    pass


def _authorised(headers: Any, token: str | None) -> bool:
    if token is None:
        return True
    given = headers.get("authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


def create_app(service: ScoringService, config: ServeConfig | None = None) -> FastAPI:
    """The server's app around a loaded [`ScoringService`][halluprobe.serving.ScoringService]."""
    config = config or ServeConfig()
    queue: BatchQueue[ScoreItem, PendingScore | ItemError] = BatchQueue(
        service.score_pending, max_wait=config.max_wait_ms / 1000, max_batch=config.max_batch,
        max_pending=config.max_queue, executor=service.model_thread,
    )  # fmt: skip
    streams = asyncio.Semaphore(config.max_streams)
    state = {"draining": False}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        queue.start()
        yield
        state["draining"] = True
        await queue.close()  # the requests in flight get their answers
        service.close()

    app = FastAPI(
        title="halluprobe",
        summary="Hallucination scores of answers against their context (higher = more likely hallucinated).",
        version=_version(),
        lifespan=lifespan,
        docs_url=None,  # the Swagger and ReDoc pages load scripts from a CDN; /openapi.json is the schema
        redoc_url=None,
        responses={413: {"model": ErrorResponse}, 422: {"model": ErrorResponse}},
    )
    app.state.queue, app.state.service = queue, service
    app.add_middleware(_BodyLimit, limit=config.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, _one_line(exc.errors()))

    @app.middleware("http")
    async def bearer(request: Request, call_next):
        if request.url.path.startswith("/v1/") and not _authorised(request.headers, config.token):
            return _error(401, "missing or wrong bearer token (Authorization: Bearer TOKEN)")
        return await call_next(request)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> str:
        return resources.files("halluprobe.serving").joinpath("static", "index.html").read_text()

    @app.get("/healthz")
    async def healthz() -> Health:
        return Health(status="draining" if state["draining"] else "ok", queued=queue.pending)

    @app.get("/v1/detector")
    async def detector() -> DetectorCard:
        return service.card()

    @app.post(
        "/v1/score",
        response_model=ScoreResponse,
        responses={401: {"model": ErrorResponse}, 503: {"model": ErrorResponse}},
    )
    async def score(
        body: ScoreItem | list[ScoreItem],
        threshold: str | None = Query(
            None,
            description="What the labels and spans follow: a probability in [0, 1], or 'expected-f1' for a "
            "list of at least 20 answers of one source (the threshold that maximises their expected F1 under "
            "their own probabilities, no labels needed). Default: the detector's threshold.",
        ),
    ) -> ScoreResponse | JSONResponse:
        """Score one answer or a list of answers; one result per answer, in order."""
        items = body if isinstance(body, list) else [body]
        if not items:
            return _error(422, "the list of answers is empty")
        if len(items) > config.max_items:
            return _error(
                413, f"{len(items)} answers in one request; this server takes at most {config.max_items}"
            )
        try:  # before any forward: a threshold that cannot label this many answers is refused
            wanted = parse_threshold(threshold)
            check_threshold(wanted, len(items))
        except ValueError as exc:
            return _error(422, str(exc))
        try:
            raw = await queue.submit(items)
        except QueueFull as exc:
            return _error(503, str(exc), {"Retry-After": str(exc.retry_after)})
        except QueueClosed as exc:
            return _error(503, str(exc), {"Retry-After": "5"})
        try:
            return ScoreResponse(results=service.finish(raw, wanted))
        except ValueError as exc:  # 'expected-f1' with fewer scored answers than it needs
            return _error(422, str(exc))

    @app.websocket("/v1/stream")
    async def stream(ws: WebSocket) -> None:
        """First message ``{context, question?}``, then ``{text}`` chunks and ``{done: true}``."""
        if not _authorised(ws.headers, config.token):
            await ws.close(code=1008, reason="missing or wrong bearer token")
            return
        if streams.locked():
            await ws.close(code=1013, reason=f"{config.max_streams} streams open; retry later")
            return
        async with streams:
            await ws.accept()
            try:
                await _follow(ws, service, config)
            except WebSocketDisconnect:
                return

    return app


async def _run(service: ScoringService, fn, *args):
    return await asyncio.wrap_future(service.on_model_thread(fn, *args))


async def _follow(ws: WebSocket, service: ScoringService, config: ServeConfig) -> None:
    """The stream protocol: updates as chunks arrive, then the ``done`` event; errors close it."""

    async def fail(message: str) -> None:
        await ws.send_json(StreamEvent(event="error", message=message).model_dump(exclude_none=True))
        await ws.close(code=1008)

    try:
        start = StreamStart.model_validate_json(await ws.receive_text())
    except ValidationError as exc:
        return await fail("first message: " + _one_line(exc.errors(), "{context, question?}"))
    follower = await _run(service, service.follow, start.context, start.question)
    size = 0
    while True:
        text = await ws.receive_text()
        size += len(text.encode())
        if size > config.max_body_bytes:
            return await fail(f"the streamed answer is over {config.max_body_bytes} bytes")
        try:
            chunk = StreamChunk.model_validate_json(text)
        except ValidationError as exc:
            return await fail(_one_line(exc.errors(), "{text} or {done: true}"))
        try:
            if chunk.text and (update := await _run(service, follower.add, chunk.text)) is not None:
                await ws.send_json(stream_event(update).model_dump(exclude_none=True))
            if chunk.done:
                last = await _run(service, follower.finish)
                await ws.send_json(stream_event(last).model_dump(exclude_none=True))
                threshold = float(service.detector.probe_.threshold)
                done = StreamEvent(
                    event="done", probability=float(last.probability), label=int(last.label),
                    threshold=threshold, answer_tokens=int(last.answer_tokens),
                )  # fmt: skip
                await ws.send_json(done.model_dump(exclude_none=True))
                await ws.close()
                return
        except ValueError as exc:
            return await fail(str(exc).splitlines()[0])


def _one_line(errors: Any, expected: str = "{context, question?, answer} or a list of them") -> str:
    """Pydantic's errors as one line: ``body.0.answer: Field required; ...``."""
    parts = []
    for err in list(errors)[:3]:
        where = ".".join(str(x) for x in err.get("loc", ()) if x not in ("body",)) or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    if not parts:
        return "malformed request"
    return "; ".join(parts).replace("\n", " ") + f" (expected {expected})"


def _version() -> str:
    from halluprobe import __version__

    return __version__


__all__ = ["ServeConfig", "create_app"]
