"""Hostile clients of ``halluprobe serve`` (loopback only), for ``serve_load.py --abuse``.

Each case sends one kind of bad request, or misbehaves as a client, and checks the server's answer:
the status and ``{"error": ...}`` of a refused request, the close code and ``error`` event of a refused
stream, a 408 for a client too slow. `run_hostile` replays every case in turn until a deadline, from
several threads, while `run_good` sends real requests whose answers must equal the offline ones.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable

import httpx

HOST = "127.0.0.1"
"""The only address this script talks to."""

JSON = {"Content-Type": "application/json"}


def _post(url: str, content, headers=None, timeout: float = 60) -> httpx.Response:
    return httpx.post(f"{url}/v1/score", content=content, headers=headers or JSON, timeout=timeout)


def _error_is(r: httpx.Response, status: int, words: str) -> bool:
    try:
        body = r.json()
    except ValueError:
        return False
    return r.status_code == status and set(body) == {"error"} and words in body["error"]


def _raw(port: int, first: bytes, drip: bytes, limit: float) -> bytes:
    """Send ``first``, then one byte of ``drip`` a second; the bytes the server answered with."""
    got = b""
    with socket.create_connection((HOST, port), timeout=limit) as s:
        s.sendall(first)
        deadline = time.monotonic() + limit
        try:
            while time.monotonic() < deadline and not got:
                time.sleep(1)
                s.sendall(drip[:1])
                s.settimeout(0.05)
                try:
                    got += s.recv(4096)
                except TimeoutError:
                    pass
            s.settimeout(5)
            while chunk := s.recv(4096):
                got += chunk
        except OSError:  # the server closed the connection while we were sending
            pass
    return got


def _stream(url: str, messages: list, wait: float = 60, **kw) -> tuple[list[dict], int | str]:
    """Send ``messages`` on ``/v1/stream``; the events received (``wait`` s at most) and the close code
    (or what happened instead: no close frame, a timeout)."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    events = []
    try:
        with connect(url.replace("http", "ws") + "/v1/stream", max_size=None, open_timeout=wait, **kw) as ws:
            for m in messages:
                ws.send(m)
            while True:
                events.append(json.loads(ws.recv(timeout=wait)))
    except ConnectionClosed as exc:
        if exc.rcvd is not None:
            return events, exc.rcvd.code
        return events, f"no close frame (we sent {exc.sent.code if exc.sent else None})"
    except TimeoutError:
        return events, f"no answer in {wait:g} s"


def _refused(url: str, messages: list, code: int, words: str | None) -> tuple[bool, str]:
    """A stream of ``messages`` ends with an ``error`` event naming ``words`` and the close ``code``
    (``words`` None: the close code alone, for a message the transport refuses before the app sees it).

    A 1013 (every stream slot taken, by the other hostile threads) is retried a second later, as the
    close code asks.
    """
    for _ in range(10):
        events, got = _stream(url, messages)
        if got != 1013:
            break
        time.sleep(1)
    last = events[-1] if events else {}
    named = words is None or (last.get("event") == "error" and words in last.get("message", ""))
    ok = got == code and named
    return ok, f"close {got}: {last.get('message', '')[:80]}"


def cases(url: str, port: int, limits: dict, row: dict) -> dict[str, Callable[[], bool | tuple[bool, str]]]:
    """Name -> a hostile case that returns whether the server answered as documented."""
    item = json.dumps({k: row[k] for k in ("context", "question", "answer")}).encode()
    big = limits["max_body_bytes"]

    def chunked():
        for _ in range(big // 1000 + 10):
            yield b" " * 1000

    return {
        "lone surrogate -> 422": lambda: _error_is(
            _post(url, json.dumps({"context": "c", "answer": "a \ud800"}).encode()), 422, "surrogate"
        ),
        "invalid UTF-8 -> 400": lambda: _error_is(
            _post(url, b'{"context": "\xff", "answer": "a"}'), 400, "UTF-8"
        ),
        "text/plain -> 415": lambda: _error_is(_post(url, item, {"Content-Type": "text/plain"}), 415, "JSON"),
        "no content type -> 415": lambda: _error_is(_post(url, item, {"Content-Type": ""}), 415, "JSON"),
        "404 -> json": lambda: _error_is(httpx.get(f"{url}/nope"), 404, "Not Found"),
        "405 -> json": lambda: _error_is(httpx.get(f"{url}/v1/score"), 405, "Not Allowed"),
        "chunked over the limit -> 413": lambda: _error_is(_post(url, chunked()), 413, f"over {big} bytes"),
        "more answers than the queue -> 413": lambda: _error_is(
            _post(url, json.dumps([json.loads(item)] * (limits["max_queue"] + 1)).encode()), 413, "at most"
        ),
        "slow headers -> 408": lambda: _raw(
            port, b"POST /v1/score HTTP/1.1\r\nHost: x\r\n", b"X", 30
        ).startswith(b"HTTP/1.1 408"),
        "slow body -> 408": lambda: _raw(
            port,
            b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 99\r\n\r\n",
            b" ",
            30,
        ).startswith(b"HTTP/1.1 408"),  # fmt: skip
        "client leaves at once": lambda: _leave(port, item),
        "stream binary frame -> 1008": lambda: _refused(url, [b"{}"], 1008, "binary"),
        "stream lone surrogate -> 1008": lambda: _refused(
            url, [json.dumps({"context": "Ada lives in Lyon.\ud800"})], 1008, "first message"
        ),
        "stream 5 MB first message -> 1009": lambda: _refused(url, ["x" * 5_000_000], 1009, None),
        "stream idle -> 1008": lambda: _refused(url, [], 1008, "no message"),
        "stream over its bytes -> 1009": lambda: _refused(
            url,
            [json.dumps({"context": "Ada."}), *[json.dumps({"text": "x" * 1000})] * (big // 1000 + 2)],
            1009,
            "over",
        ),  # fmt: skip
        "stream context over the positions -> 1008": lambda: _refused(
            url, [json.dumps({"context": "a " * 9000})], 1008, "positions"
        ),
    }


def _leave(port: int, item: bytes) -> bool:
    """A request whose client closes the connection right after sending it (the server must carry on)."""
    with socket.create_connection((HOST, port), timeout=10) as s:
        s.sendall(
            b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(item)}\r\n\r\n".encode()
            + item
        )
    return True


def streams_over_the_limit(url: str, max_streams: int) -> bool:
    """``max_streams`` streams held open, one more: it is closed with 1013."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    opened: list = []
    try:
        for _ in range(60):  # the slots free up as the hostile threads' streams end
            if len(opened) == max_streams:
                break
            ws = connect(url.replace("http", "ws") + "/v1/stream")
            try:
                ws.send(json.dumps({"context": "Ada lives in Lyon."}))
                ws.recv(timeout=0.5)  # an event here is a refusal: the slot was not ours
                ws.close()
                time.sleep(1)
            except TimeoutError:  # open, following the prompt
                opened.append(ws)
            except ConnectionClosed:
                time.sleep(1)
        return len(opened) == max_streams and _stream(url, [])[1] == 1013
    finally:
        for ws in opened:
            ws.close()


def long_stream_keeps_answering_pings(url: str, context: str, answer: str, until: float) -> tuple[bool, str]:
    """A stream on a long context, with a client that pings every second and gives up after 5 s."""
    chunks = [answer[i : i + 12] for i in range(0, len(answer), 12)]
    messages = [json.dumps({"context": context}), *(json.dumps({"text": c}) for c in chunks)]
    events, code = [], None
    while time.monotonic() < until - 1:  # 1013 while the hostile cases' streams are closing: retry later
        wait = until - time.monotonic()
        events, code = _stream(
            url, [*messages, json.dumps({"done": True})], wait, ping_interval=1, ping_timeout=5
        )
        if code != 1013:
            break
        time.sleep(1)
    done = bool(events) and events[-1].get("event") == "done"
    return code == 1000 and done, f"(close {code}, {len(events)} events)"


def run_hostile(
    named: dict[str, Callable[[], bool | tuple[bool, str]]], until: float, drained: float, threads: int = 3
) -> tuple[Counter, Counter, list[str]]:
    """Every case in turn from ``threads`` threads until ``until`` (monotonic); tries, passes, failures.

    Cases still running at ``drained`` are left out of the counts.
    """
    tries, passes, failures, lock = Counter(), Counter(), [], threading.Lock()
    order = list(named)

    def worker(offset: int) -> None:
        k = offset
        while time.monotonic() < until:
            name = order[k % len(order)]
            k += 1
            try:
                got = named[name]()
                ok, seen = got if isinstance(got, tuple) else (got, "")
            except Exception as exc:  # noqa: BLE001 - a crash of the case is a failure to report
                ok, seen = False, f"{type(exc).__name__}: {exc}"
            name = f"{name} ({seen})" if seen else name
            with lock:
                tries[name.split(" (")[0]] += 1
                passes[name.split(" (")[0]] += ok
                if not ok and len(failures) < 20:
                    failures.append(name)

    workers = [threading.Thread(target=worker, args=(i * 5,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(max(0.0, drained - time.monotonic()))
    with lock:
        return Counter(tries), Counter(passes), list(failures)


def run_good(
    url: str, rows: list[dict], ref: list[dict], until: float, clients: int, tol: float, drained: float
) -> dict:
    """Single-answer requests from ``clients`` threads until ``until``; each must equal the offline answer.

    A 503 (queue full) is retried after its ``Retry-After``: it is back-pressure, not a loss. Lost: a
    request that got no 200 in the end; duplicated: a request answered more than once (one result per
    request, each request counted once); wrong: a 200 whose probability or label differs. Requests
    still waiting at ``drained`` are counted apart (``good_unanswered_at_the_budget``), not as lost.
    """
    lock, out, counter, started = threading.Lock(), [], iter(range(10**9)), set()

    def client() -> None:
        with httpx.Client(timeout=300) as c:
            while time.monotonic() < until:
                with lock:
                    i = next(counter)
                    started.add(i)
                row = rows[i % len(rows)]
                body = {k: row[k] for k in ("context", "question", "answer")}
                t, status, result, retries = time.perf_counter(), None, None, 0
                while True:
                    try:
                        r = c.post(f"{url}/v1/score", json=body)
                        status = r.status_code
                    except httpx.TransportError:
                        status = None
                        break
                    if status != 503 or time.monotonic() > until + 60:
                        result = r.json().get("results") if status == 200 else None
                        break
                    retries += 1
                    time.sleep(float(r.headers.get("Retry-After", "1")))
                with lock:
                    out.append({"i": i, "row": i % len(rows), "status": status, "results": result,
                                "retries": retries, "latency": time.perf_counter() - t})  # fmt: skip

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, drained - time.monotonic()))
    with lock:
        out, waiting = list(out), len(started) - len(out)

    def right(rec: dict) -> bool:
        want = ref[rec["row"]]
        got = rec["results"][0]
        return abs(got["probability"] - want["probability"]) <= tol and got["label"] == want["label"]

    answered = [r for r in out if r["status"] == 200 and r["results"] is not None and len(r["results"]) == 1]
    ids = Counter(r["i"] for r in out)
    lat = sorted(r["latency"] for r in answered)
    return {
        "good_requests": len(out),
        "good_unanswered_at_the_budget": waiting,
        "good_correct": sum(right(r) for r in answered),
        "good_wrong": sum(not right(r) for r in answered),
        "good_lost": len(out) - len(answered),
        "good_duplicated": sum(n - 1 for n in ids.values()),
        "good_503_retries": sum(r["retries"] for r in out),
        "good_p50_latency_s": round(lat[len(lat) // 2], 2) if lat else "n/a",
        "good_max_latency_s": round(lat[-1], 2) if lat else "n/a",
    }
