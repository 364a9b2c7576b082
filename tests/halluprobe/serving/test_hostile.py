"""``halluprobe serve`` under hostile input, on a real uvicorn server (loopback, free port).

One bad request must not fail others, no client may hold the server's resources without bound, and
every refusal is a status with ``{"error": ...}`` (or, on a stream, an ``error`` event and a close code).
"""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import numpy as np
import pytest

from .conftest import text  # noqa: TID252 (the fixtures' helpers)

TOL = 1e-5


def _items(seed: int, n: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"context": text(rng, 12), "question": text(rng, 2), "answer": text(rng, 5)} for _ in range(n)]


def _post_all(url: str, bodies: list[bytes]) -> list[httpx.Response]:
    """POST every body at once (one thread each), so that they share a batch."""
    out: dict[int, httpx.Response] = {}

    def post(i: int) -> None:
        out[i] = httpx.post(
            f"{url}/v1/score", content=bodies[i], headers={"Content-Type": "application/json"}, timeout=60
        )

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [out[i] for i in range(len(bodies))]


def _wait(predicate, what: str, limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_lone_surrogate_is_refused_alone_and_its_batch_is_scored(detector, serve):
    good = _items(1, 5)
    bad = json.dumps({"context": "w1 w2", "answer": "w3 \ud800"}).encode()  # JSON escapes the surrogate
    with serve(detector, max_wait_ms=1500, max_batch=6) as (url, _, _):
        got = _post_all(url, [bad, *[json.dumps(it).encode() for it in good]])
    assert got[0].status_code == 422, got[0].text
    assert "answer" in got[0].json()["error"] and "surrogate" in got[0].json()["error"]
    for r, item in zip(got[1:], good, strict=True):
        assert r.status_code == 200, r.text
        want = detector.predict_text(item["context"], item["question"], item["answer"])
        assert r.json()["results"][0]["probability"] == pytest.approx(want.probability, abs=TOL)


def test_an_item_that_fails_in_a_shared_batch_fails_alone(detector, serve, monkeypatch):
    import halluprobe.detectors._prediction as prediction

    real = prediction.pending_triples

    def fragile(det, triples, **kw):  # a failure the server cannot foresee, in one answer
        if any(answer == "w7 w7 w7" for _, _, answer in triples):
            raise RuntimeError("boom")
        return real(det, triples, **kw)

    monkeypatch.setattr(prediction, "pending_triples", fragile)
    good = _items(2, 3)
    boom = {"context": "w1 w2 w3", "answer": "w7 w7 w7"}
    with serve(detector, max_wait_ms=1500, max_batch=4) as (url, _, app):
        got = _post_all(url, [json.dumps(b).encode() for b in [*good, boom]])
        assert app.state.queue.batches == 1  # they did share the forward that failed
    assert [r.status_code for r in got] == [200] * 4
    failed = got[3].json()["results"][0]
    assert failed["status"] == "error" and failed["error"] == "failed" and "boom" in failed["message"]
    assert failed["message"].startswith("item 0:")  # numbered within its own request
    for r, item in zip(got[:3], good, strict=True):
        want = detector.predict_text(item["context"], item["question"], item["answer"])
        assert r.json()["results"][0]["probability"] == pytest.approx(want.probability, abs=TOL)


def test_wrong_status_and_shape_are_json_errors(detector, serve):
    item = json.dumps(_items(3, 1)[0]).encode()
    with serve(detector, max_body_bytes=4000, max_queue=4, max_items=8) as (url, _, _):

        def chunks():
            for _ in range(50):
                yield b"x" * 1000  # 50 KB, chunked: no Content-Length to refuse up front

        as_json, score = {"Content-Type": "application/json"}, f"{url}/v1/score"
        cases = {
            "chunked": httpx.post(f"{url}/v1/score", content=chunks(), headers=as_json),
            "utf8": httpx.post(score, content=b'{"context": "\xff", "answer": "w1"}', headers=as_json),
            "404": httpx.get(f"{url}/nope"),
            "405": httpx.get(f"{url}/v1/score"),
            "text/plain": httpx.post(f"{url}/v1/score", content=item, headers={"Content-Type": "text/plain"}),
            "no type": httpx.post(f"{url}/v1/score", content=item, headers={"Content-Type": ""}),
            "over queue": httpx.post(f"{url}/v1/score", json=_items(4, 5)),
        }  # fmt: skip
    want = {
        "chunked": (413, "over 4000 bytes"),
        "utf8": (400, "not UTF-8 (byte 14)"),
        "404": (404, "Not Found"),
        "405": (405, "Method Not Allowed"),
        "text/plain": (415, "Content-Type: application/json"),
        "no type": (415, "no content type"),
        "over queue": (413, "5 answers in one request; this server takes at most 4"),
    }
    for name, (status, words) in want.items():
        r = cases[name]
        assert r.status_code == status, (name, r.text)
        assert set(r.json()) == {"error"} and words in r.json()["error"], (name, r.text)


@pytest.mark.slow  # seconds of a client sending a byte a second
def test_slow_clients_are_cut_off(detector, serve):
    with serve(detector, header_timeout_s=1, body_timeout_s=1) as (url, _, _):
        port = int(url.rsplit(":", 1)[1])
        answers = {}
        for name, first, rest in [
            ("headers", b"POST /v1/score HTTP/1.1\r\nHost: x\r\n", b"X-Slow: 1\r\n"),
            ("body", b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{", b" "),
        ]:  # fmt: skip
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(first)
                for _ in range(30):  # one byte a second for up to 30 s, or until the server answers
                    if _readable(s, wait_s=1.0):  # read the answer before sending into a closed socket
                        break
                    try:
                        s.sendall(rest[:1])
                    except OSError:  # closed by the server while we were sending
                        break
                got = _drain(s)
            answers[name] = got
    for name, got in answers.items():
        assert got.startswith(b"HTTP/1.1 408"), (name, got)
        assert b'"error"' in got and (b"in time" in got or b"within 1 s" in got), (name, got)


def _readable(s: socket.socket, wait_s: float = 0.0) -> bool:
    import select

    return bool(select.select([s], [], [], wait_s)[0])


def _drain(s: socket.socket) -> bytes:
    """Everything the server sent until it closed (or reset) the connection."""
    got = b""
    try:
        while chunk := s.recv(4096):
            got += chunk
    except OSError:
        pass
    return got


def test_the_work_of_a_client_that_left_is_dropped(detector, serve):
    item = json.dumps(_items(5, 1)[0]).encode()
    with serve(detector, max_wait_ms=3000) as (url, _, app):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      + f"Content-Length: {len(item)}\r\n\r\n".encode() + item)  # fmt: skip
            _wait(lambda: httpx.get(f"{url}/healthz").json()["queued"] == 1, "the request never queued")
        _wait(lambda: app.state.queue.dropped == 1, "the queued work of a client that left was kept")
        assert httpx.get(f"{url}/healthz").json()["queued"] == 0
        time.sleep(3.5)  # past the batching wait: nothing left to run
        assert app.state.queue.batches == 0


def test_expected_f1_does_not_turn_a_supported_batch_hallucinated(detector, serve):
    import copy
    from dataclasses import replace

    items = _items(6, 20)
    probs = [detector.predict_text(it["context"], it["question"], it["answer"]).probability for it in items]
    strict = copy.deepcopy(detector)  # calls all twenty supported
    strict.probe_ = replace(strict.probe_, threshold=max(probs) + 0.01)
    strict._extractor = detector._extractor
    with serve(strict) as (url, _, _):
        got = httpx.post(f"{url}/v1/score", params={"threshold": "expected-f1"}, json=items, timeout=60)
    assert got.status_code == 200
    assert [r["label"] for r in got.json()["results"]] == [0] * 20


def test_the_card_names_no_server_path_and_the_api_pages_are_served(detector, serve, tmp_path):
    from halluprobe import Detector

    folder = detector.save(tmp_path / "secret" / "place" / "mydet")
    loaded = Detector.load(folder)
    loaded._extractor = detector._extractor
    with serve(loaded) as (url, _, _):
        card = httpx.get(f"{url}/v1/detector").json()
        docs, redoc = httpx.get(f"{url}/docs"), httpx.get(f"{url}/redoc")
    assert card["source"] == "mydet" and str(tmp_path) not in json.dumps(card)
    assert docs.status_code == 200 and "swagger" in docs.text.lower() and "/openapi.json" in docs.text
    assert redoc.status_code == 200 and "redoc" in redoc.text.lower()


def _ws(url: str, **kw):
    from websockets.sync.client import connect

    return connect(url.replace("http", "ws") + "/v1/stream", **kw)


def _closed(ws) -> tuple[list[dict], int | None]:
    """The events until the server closes, and its close code."""
    from websockets.exceptions import ConnectionClosed

    events = []
    try:
        while True:
            events.append(json.loads(ws.recv(timeout=30)))
    except ConnectionClosed as exc:
        return events, exc.rcvd.code if exc.rcvd else None


def test_stream_edges_get_an_error_event_and_a_close_code(detector, serve):
    with serve(detector, max_streams=1, stream_idle_s=1) as (url, _, _):
        with _ws(url) as ws:
            ws.send(b'{"context": "w1"}')  # a binary frame
            binary = _closed(ws)
        with _ws(url) as ws:
            ws.send(json.dumps({"context": " ".join(["w1"] * 300)}))  # over the proxy's 256 positions
            long = _closed(ws)
        with _ws(url) as ws:  # sends nothing
            idle = _closed(ws)
        with _ws(url) as first:
            first.send(json.dumps({"context": "w1 w2"}))
            with _ws(url) as second:  # over --max-streams: accepted, then closed with 1013
                busy = _closed(second)
    assert binary[1] == 1008 and binary[0][-1]["event"] == "error" and "binary" in binary[0][-1]["message"]
    assert long[1] == 1008 and "tokens but the proxy reads at most 256" in long[0][-1]["message"]
    assert idle[1] == 1008 and "no message for 1 s" in idle[0][-1]["message"]
    assert busy[1] == 1013


def test_stream_messages_are_bounded_by_max_body_bytes(detector, serve):
    with serve(detector, max_body_bytes=600) as (url, _, _):
        with _ws(url) as ws:
            ws.send(json.dumps({"context": "w1 w2"}))
            for _ in range(3):
                ws.send(json.dumps({"text": " w3" * 70}))  # 222 bytes each: over 600 in all
            big = _closed(ws)
        with _ws(url) as ws:
            ws.send(json.dumps({"context": "w1 " * 5000}))  # one message far over: the transport refuses it
            huge = _closed(ws)
    assert big[1] == 1009 and "over 600 bytes" in big[0][-1]["message"]
    assert big[0][-1]["event"] == "error" and all(e["event"] == "tokens" for e in big[0][:-1])
    assert huge[1] == 1009


def test_a_stream_outlives_the_header_deadline(detector, serve):
    with serve(detector, header_timeout_s=1) as (url, _, _), _ws(url) as ws:
        ws.send(json.dumps({"context": "w1 w2 w3"}))
        time.sleep(2.5)  # past the deadline of an HTTP request's headers: the stream must not care
        ws.send(json.dumps({"text": " w4"}))
        ws.send(json.dumps({"done": True}))
        events, code = _closed(ws)
    assert code == 1000 and events[-1]["event"] == "done", events


@pytest.mark.slow  # a proxy kept busy for seconds
def test_a_stream_answers_pings_while_the_proxy_works(detector, serve, monkeypatch):
    from halluprobe.serving import ScoringService

    follow = ScoringService.follow

    def slow_follow(self, context, question):
        follower = follow(self, context, question)
        add = follower.add

        def slow_add(chunk):
            time.sleep(2.5)  # the proxy busy on a long context; the client's pings must still be answered
            return add(chunk)

        follower.add = slow_add
        return follower

    monkeypatch.setattr(ScoringService, "follow", slow_follow)
    with serve(detector) as (url, _, _), _ws(url, ping_interval=0.3, ping_timeout=1.0) as ws:
        ws.send(json.dumps({"context": "w1 w2 w3"}))
        for chunk in (" w4", " w5"):
            ws.send(json.dumps({"text": chunk}))
        ws.send(json.dumps({"done": True}))
        events, code = _closed(ws)
    assert code == 1000 and events[-1]["event"] == "done", events


@pytest.mark.slow  # loads SmolLM2 behind the packaged detector
def test_serve_on_port_0_prints_the_port_it_bound_and_stops_on_sigterm():
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "halluprobe", "serve", "--port", "0", "--json", "--device", "cpu"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        printed = ""
        while not printed.endswith("}\n"):  # the one --json document, before the server runs
            printed += proc.stdout.readline()
        doc = json.loads(printed)
        port = int(doc["url"].rsplit(":", 1)[1])
        assert doc["url"].startswith("http://127.0.0.1:") and port > 0
        _wait(lambda: _answers(f"http://127.0.0.1:{port}/healthz"), "the server never answered", 300)
        card = httpx.get(f"http://127.0.0.1:{port}/v1/detector").json()
        assert card["source"] in (None, "general")  # a folder's name at most, never a path
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        proc.stdout.close()
    assert code in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down cleanly


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False
