"""The edge of ``halluprobe serve``: what a request must be before a route sees it (pure ASGI).

For HTTP requests, in order: the bearer token on ``/v1/*`` (401); a body of at most ``max_body_bytes``
(413, declared or streamed, chunked included) that arrives within ``body_timeout_s`` (408); and for a
request with a body, ``Content-Type: application/json`` (415) and UTF-8 text (400). The route then reads
the body from memory; later ``receive`` calls reach the server, so a route can see the client leave.
Every refusal is one line of JSON, ``{"error": ...}``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from halluprobe.serving.config import ServeConfig


async def send_error(send: Send, status: int, message: str, headers: dict[str, str] | None = None) -> None:
    """Answer ``{"error": message}`` with ``status`` (and ``headers``) on a raw ASGI ``send``."""
    body = json.dumps({"error": message}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def authorised(headers: Any, token: str | None) -> bool:
    """Whether ``headers`` carry ``Authorization: Bearer <token>`` (always, when no token is set)."""
    if token is None:
        return True
    given = headers.get("authorization", "")
    return hmac.compare_digest(given.encode(errors="replace"), f"Bearer {token}".encode())


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class Guard:
    """The checks above, around the app."""

    def __init__(self, app: ASGIApp, config: ServeConfig) -> None:
        self.app, self.config = app, config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if scope["path"].startswith("/v1/") and not authorised(headers, self.config.token):
            return await send_error(send, 401, "missing or wrong bearer token (Authorization: Bearer TOKEN)")
        try:
            body = await self._body(headers, receive)
            if body:
                _check_json(headers, body)
        except _Refused as exc:
            return await send_error(send, exc.status, exc.message, {"connection": "close"})
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # http.disconnect when the client leaves

        await self.app(scope, replay, send)

    async def _body(self, headers: dict[str, str], receive: Receive) -> bytes:
        limit = self.config.max_body_bytes
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise _Refused(413, f"request body over {limit} bytes")
        deadline = time.monotonic() + self.config.body_timeout_s
        chunks, size = [], 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise _Refused(
                    408, f"the request body did not arrive within {self.config.body_timeout_s:g} s"
                ) from None
            if message["type"] == "http.disconnect":
                raise _Refused(400, "the client closed the connection before the body ended")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _Refused(413, f"request body over {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _check_json(headers: dict[str, str], body: bytes) -> None:
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json" and not kind.endswith("+json"):
        raise _Refused(
            415,
            f"the body is sent as {kind or 'no content type'}; send JSON with Content-Type: application/json",
        )
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Refused(400, f"the request body is not UTF-8 (byte {exc.start + 1})") from None
