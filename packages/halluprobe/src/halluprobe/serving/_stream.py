"""The ``/v1/stream`` WebSocket protocol: a prompt, chunks of the answer, updates, then ``done``.

A reader task takes every message as it arrives (so the connection keeps answering pings while the
proxy works) and bounds them: text frames only, ``max_body_bytes`` in all, and a message at least
every ``stream_idle_s`` seconds. Each chunk gives one update, as ``halluprobe stream`` does. All
proxy work runs on the service's model thread. Every refusal sends an ``error`` event,
then closes: 1008 for a bad message, 1009 for too many bytes, 1011 for a failure of the server.
"""

from __future__ import annotations

import asyncio

from fastapi import WebSocket
from pydantic import ValidationError

from halluprobe.serving.config import ServeConfig
from halluprobe.serving.schemas import StreamChunk, StreamEvent, StreamStart, one_line
from halluprobe.serving.service import ScoringService, stream_event

MESSAGE_COST = 16
"""Bytes a message counts for at least, so that empty messages cannot pile up without bound."""


class _Refusal(Exception):
    def __init__(self, message: str, code: int = 1008) -> None:
        super().__init__(message)
        self.message, self.code = message, code


class _Gone(Exception):
    """The client closed the connection."""


class _Inbox:
    """The messages read so far, and what ended the reading.

    The end comes before the messages still waiting: a client that left, or broke a bound, gets no
    more proxy work.
    """

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.end: Exception | None = None

    def stop(self, end: Exception) -> None:
        self.end = end
        self.queue.put_nowait(None)  # wakes a waiting `next`

    async def next(self) -> str:
        if self.end is None:
            item = await self.queue.get()
            if item is not None and self.end is None:
                return item
        assert self.end is not None
        raise self.end


async def _read(ws: WebSocket, inbox: _Inbox, config: ServeConfig) -> None:
    """Put each text message in ``inbox`` until ``done``; stop it with the refusal or `_Gone` that ends it."""
    size = 0
    while True:
        try:
            message = await asyncio.wait_for(ws.receive(), config.stream_idle_s)
        except TimeoutError:
            return inbox.stop(_Refusal(f"no message for {config.stream_idle_s:g} s; the stream is closed"))
        if message["type"] == "websocket.disconnect":
            return inbox.stop(_Gone())
        text = message.get("text")
        if text is None:
            return inbox.stop(_Refusal("binary frame: send JSON text messages"))
        size += max(len(text.encode("utf-8", "surrogatepass")), MESSAGE_COST)
        if size > config.max_body_bytes:
            return inbox.stop(_Refusal(f"the stream's messages are over {config.max_body_bytes} bytes", 1009))
        inbox.queue.put_nowait(text)
        if _is_done(text):
            return


def _is_done(text: str) -> bool:
    try:
        return StreamChunk.model_validate_json(text).done
    except ValidationError:
        return False


def _chunk(text: str) -> StreamChunk:
    try:
        return StreamChunk.model_validate_json(text)
    except ValidationError as exc:
        raise _Refusal(one_line(exc.errors(), "{text} or {done: true}")) from None


async def follow(ws: WebSocket, service: ScoringService, config: ServeConfig) -> None:
    """Run one accepted stream to its end (module doc); never raises for what the client sent."""
    inbox = _Inbox()
    reader = asyncio.create_task(_read(ws, inbox, config))
    try:
        await _protocol(ws, service, inbox)
    except _Gone:
        return
    except _Refusal as exc:
        await _close(ws, exc.message, exc.code)
    except Exception as exc:  # noqa: BLE001 - the client gets an error event, the server goes on
        await _close(ws, f"the server failed on this stream ({type(exc).__name__})", 1011)
        raise
    finally:
        reader.cancel()


async def _protocol(ws: WebSocket, service: ScoringService, inbox: _Inbox) -> None:
    try:
        start = StreamStart.model_validate_json(await inbox.next())
    except ValidationError as exc:
        raise _Refusal("first message: " + one_line(exc.errors(), "{context, question?}")) from None
    try:
        follower = await _run(service, service.follow, start.context, start.question)
    except ValueError as exc:  # a prompt longer than the proxy's positions
        raise _Refusal(str(exc).splitlines()[0]) from None
    while True:
        chunk = _chunk(await inbox.next())
        try:
            if chunk.text and (update := await _run(service, follower.add, chunk.text)) is not None:
                await ws.send_json(stream_event(update).model_dump(exclude_none=True))
            if chunk.done:
                last = await _run(service, follower.finish)
                await ws.send_json(stream_event(last).model_dump(exclude_none=True))
                done = StreamEvent(
                    event="done", probability=float(last.probability), label=int(last.label),
                    threshold=float(service.detector.probe_.threshold), answer_tokens=int(last.answer_tokens),
                )  # fmt: skip
                await ws.send_json(done.model_dump(exclude_none=True))
                await ws.close()
                return
        except ValueError as exc:
            raise _Refusal(str(exc).splitlines()[0]) from None


async def _run(service: ScoringService, fn, *args):
    return await asyncio.wrap_future(service.on_model_thread(fn, *args))


async def _close(ws: WebSocket, message: str, code: int) -> None:
    try:
        await ws.send_json(StreamEvent(event="error", message=message).model_dump(exclude_none=True))
        await ws.close(code=code, reason=message.encode()[:120].decode(errors="ignore"))
    except Exception:  # noqa: BLE001, S110 - the client already left
        pass
