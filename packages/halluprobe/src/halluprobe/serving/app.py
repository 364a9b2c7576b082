"""The ASGI app of ``halluprobe serve`` (FastAPI): each route translates HTTP to one library call.

Routes: ``POST /v1/score`` (through the [`BatchQueue`][halluprobe.serving.BatchQueue]), the WebSocket
``/v1/stream`` (`halluprobe.serving._stream`), ``GET /healthz``, ``GET /v1/detector``, ``GET
/openapi.json`` with its Swagger UI at ``/docs`` and ReDoc at ``/redoc``, and the page at ``/``. What a
request must be before a route sees it is checked at the edge (`halluprobe.serving._guard`). Refusals
are one line of JSON, ``{"error": ...}``, with a 4xx status (503 with ``Retry-After`` when the queue is
full, 500 when the server fails).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any, TypeVar

from fastapi import FastAPI, Query, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from halluprobe._threshold import check_threshold, parse_threshold
from halluprobe.serving._guard import Guard, authorised
from halluprobe.serving._stream import follow
from halluprobe.serving.batching import BatchQueue, QueueClosed, QueueFull
from halluprobe.serving.config import ServeConfig
from halluprobe.serving.schemas import (
    DetectorCard,
    ErrorResponse,
    Health,
    ItemError,
    ScoreItem,
    ScoreResponse,
    one_line,
)
from halluprobe.serving.service import PendingScore, ScoringService

V = TypeVar("V")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def create_app(service: ScoringService, config: ServeConfig | None = None) -> FastAPI:
    """The server's app around a loaded [`ScoringService`][halluprobe.serving.ScoringService]."""
    config = config or ServeConfig()
    queue: BatchQueue[tuple[int, ScoreItem], PendingScore | ItemError] = BatchQueue(
        lambda pairs: service.score_pending([it for _, it in pairs], [i for i, _ in pairs]),
        max_wait=config.max_wait_ms / 1000, max_batch=config.max_batch, max_pending=config.max_queue,
        executor=service.model_thread,
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
        responses={
            400: {"model": ErrorResponse}, 408: {"model": ErrorResponse}, 413: {"model": ErrorResponse},
            415: {"model": ErrorResponse}, 422: {"model": ErrorResponse},
        },
    )  # fmt: skip
    app.state.queue, app.state.service, app.state.config = queue, service, config
    app.add_middleware(Guard, config=config)
    _add_error_handlers(app)

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
        request: Request,
        body: ScoreItem | list[ScoreItem],
        threshold: str | None = Query(
            None,
            description="What the labels and spans follow: a probability in [0, 1], or 'expected-f1' for a "
            "list of at least 20 answers of one source (the threshold that maximises their expected F1 under "
            "their own probabilities, no labels needed; the detector's own when no answer reaches it). "
            "Default: the detector's threshold.",
        ),
    ) -> ScoreResponse | JSONResponse:
        """Score one answer or a list of answers; one result per answer, in order."""
        items = body if isinstance(body, list) else [body]
        if not items:
            return _error(422, "the list of answers is empty")
        most = min(config.max_items, config.max_queue)
        if len(items) > most:
            return _error(413, f"{len(items)} answers in one request; this server takes at most {most}")
        try:  # before any forward: a threshold that cannot label this many answers is refused
            wanted = parse_threshold(threshold)
            check_threshold(wanted, len(items))
        except ValueError as exc:
            return _error(422, str(exc))
        try:
            raw = await _unless_gone(request, queue.submit(list(enumerate(items))))
        except QueueFull as exc:
            return _error(503, str(exc), {"Retry-After": str(exc.retry_after)})
        except QueueClosed as exc:
            return _error(503, str(exc), {"Retry-After": "5"})
        except _ClientGone:
            return _error(499, "the client closed the connection")  # nobody reads it
        try:
            return ScoreResponse(results=service.finish(raw, wanted))
        except ValueError as exc:  # 'expected-f1' with fewer scored answers than it needs
            return _error(422, str(exc))

    @app.websocket("/v1/stream")
    async def stream(ws: WebSocket) -> None:
        """First message ``{context, question?}``, then ``{text}`` chunks and ``{done: true}``."""
        await ws.accept()  # refusals are close codes, which need an accepted connection
        if not authorised(ws.headers, config.token):
            await ws.close(code=1008, reason="missing or wrong bearer token")
            return
        if streams.locked():
            await ws.close(code=1013, reason=f"{config.max_streams} streams open; retry later")
            return
        async with streams:
            await follow(ws, service, config)

    return app


class _ClientGone(Exception):
    pass


async def _unless_gone(request: Request, work: Coroutine[Any, Any, V]) -> V:
    """``await work``, cancelled when the client disconnects first (`_ClientGone` then)."""
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise _ClientGone
    return task.result()


def _add_error_handlers(app: FastAPI) -> None:
    """Every error the framework answers is ``{"error": ...}`` too (404, 405, malformed JSON, 500)."""

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, one_line(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def failure(request: Request, exc: Exception) -> JSONResponse:
        return _error(500, f"the server failed on this request ({type(exc).__name__})")


def _version() -> str:
    from halluprobe import __version__

    return __version__


__all__ = ["ServeConfig", "create_app"]
