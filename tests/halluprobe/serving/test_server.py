"""``halluprobe serve``'s app on a real uvicorn server (loopback, free port) with a tiny detector."""

from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest
from halluprobe import Detector
from halluprobe.cli import main
from halluprobe.detectors._streaming import stream_text_chunks

from .conftest import text  # noqa: TID252 (the fixtures' helpers)

TOL = 1e-5


def _items(seed: int, n: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"context": text(rng, 12), "question": text(rng, 2), "answer": text(rng, 5)} for _ in range(n)]


def _wait_queued(url: str, n: int) -> None:
    deadline = time.monotonic() + 20
    while httpx.get(f"{url}/healthz").json()["queued"] < n:
        assert time.monotonic() < deadline, "the request never reached the queue"
        time.sleep(0.01)


def test_endpoints_score_like_the_library(detector, serve):
    items = _items(1, 3)
    with serve(detector) as (url, _, _):
        assert httpx.get(f"{url}/healthz").json() == {"status": "ok", "queued": 0}
        card = httpx.get(f"{url}/v1/detector").json()
        assert card["feature_set"] == "A7L9" and card["threshold"] == pytest.approx(detector.probe_.threshold)
        schema = httpx.get(f"{url}/openapi.json").json()
        assert {"/v1/score", "/v1/detector", "/healthz"} <= set(schema["paths"])
        assert {"ScoreItem", "ItemScore", "ItemError", "DetectorCard"} <= set(schema["components"]["schemas"])
        page = httpx.get(f"{url}/")
        assert page.status_code == 200 and "<form" in page.text and "v1/score" in page.text
        one = httpx.post(f"{url}/v1/score", json=items[0]).json()["results"]
        many = httpx.post(f"{url}/v1/score", json=items).json()["results"]
    assert len(one) == 1 and len(many) == 3
    for item, got in zip(items, many, strict=True):
        want = detector.predict_text(item["context"], item["question"], item["answer"])
        assert got["status"] == "ok" and got["probability"] == pytest.approx(want.probability, abs=TOL)
        assert got["label"] == want.label and got["answer_tokens"] == len(want.tokens)
        assert [(s["start"], s["end"]) for s in got["spans"]] == [(s.start, s.end) for s in want.spans]
        for s in got["spans"]:
            assert s["text"] == item["answer"][s["start"] : s["end"]] and 0 <= s["confidence"] <= 1
    assert one[0]["probability"] == pytest.approx(many[0]["probability"], abs=TOL)


def test_score_labels_a_request_at_the_threshold_it_asks_for(detector, serve):
    from halluprobe import expected_f1_threshold

    items = _items(7, 21) + [{"context": "w1 w2", "answer": " "}]  # 21 scored, one refused
    triples = [(it["context"], it["question"], it["answer"]) for it in items[:21]]
    with serve(detector) as (url, _, _):
        plain = httpx.post(f"{url}/v1/score", json=items).json()["results"]
        batch = httpx.post(f"{url}/v1/score", params={"threshold": "expected-f1"}, json=items).json()[
            "results"
        ]
        fixed = httpx.post(f"{url}/v1/score", params={"threshold": "0"}, json=items[:3]).json()["results"]
        refusals = [
            httpx.post(f"{url}/v1/score", params={"threshold": t}, json=items[:19] + items[21:])
            for t in ("expected-f1", "1.5", "median")
        ]  # 20 answers, 19 of them scored: too few for the batch threshold
        early = httpx.post(f"{url}/v1/score", params={"threshold": "expected-f1"}, json=items[:5])
    probs = np.array([r["probability"] for r in plain[:21]])
    t = expected_f1_threshold(probs)
    want = detector.predict_batch(triples, threshold="expected-f1")
    assert want[0].threshold == pytest.approx(t, abs=TOL) and batch[21]["status"] == "error"
    for got, w, p in zip(batch[:21], want, probs, strict=True):
        assert got["probability"] == pytest.approx(p) and got["threshold"] == pytest.approx(t)
        assert got["label"] == int(p >= got["threshold"]) == w.label
        assert [(s["start"], s["end"]) for s in got["spans"]] == [(s.start, s.end) for s in w.spans]
    assert all(r["label"] == 1 and r["threshold"] == 0 for r in fixed)
    assert [r.status_code for r in refusals] == [422, 422, 422]
    assert "at least 20 answers" in refusals[0].json()["error"]
    assert early.status_code == 422 and "got 5" in early.json()["error"]  # refused before any forward
    assert "a probability in [0, 1] or expected-f1" in refusals[1].json()["error"]


def test_bad_requests_get_one_line_reasons(detector, serve):
    items = _items(2, 3)
    long_item = {
        "context": " ".join(["w1"] * 300),
        "answer": "w2 w3",
    }  # 300 tokens > the proxy's 256 positions
    with serve(detector, max_items=4, max_body_bytes=4000, token="s3cret") as (url, _, _):
        auth = {"Authorization": "Bearer s3cret"}
        assert httpx.post(f"{url}/v1/score", json=items[0]).status_code == 401
        assert (
            httpx.post(f"{url}/v1/score", json=items[0], headers={"Authorization": "Bearer x"}).status_code
            == 401
        )
        assert httpx.get(f"{url}/healthz").status_code == 200  # health stays open
        for body, status, words in [
            (b"{not json", 422, "JSON"),
            (json.dumps({"context": "w1"}).encode(), 422, "answer: Field required"),
            (json.dumps({"context": 3, "answer": "w1"}).encode(), 422, "context"),
            (json.dumps([]).encode(), 422, "empty"),
            (json.dumps(items * 2).encode(), 413, "at most 4"),
            (json.dumps({"context": "w1 " * 2000, "answer": "w1"}).encode(), 413, "over 4000 bytes"),
        ]:
            r = httpx.post(
                f"{url}/v1/score", content=body, headers={**auth, "Content-Type": "application/json"}
            )
            assert r.status_code == status, r.text
            reason = r.json()["error"]
            assert words in reason and "\n" not in reason
        mixed = [items[0], long_item, {**items[1], "answer": "  "}, items[2]]
        r = httpx.post(f"{url}/v1/score", json=mixed, headers=auth)
    assert r.status_code == 200
    got = r.json()["results"]
    assert [g["status"] for g in got] == ["ok", "error", "error", "ok"]
    assert got[1]["error"] == "too_long" and got[1]["message"].startswith("example 'item 1' has 3")
    assert got[2] == {"status": "error", "error": "empty_answer", "message": "item 2: the answer is empty"}
    want = detector.predict_text(items[2]["context"], items[2]["question"], items[2]["answer"])
    assert got[3]["probability"] == pytest.approx(want.probability, abs=TOL)


@pytest.mark.slow
def test_a_full_queue_answers_503_with_retry_after(detector, serve):
    items = _items(3, 2)
    with serve(detector, max_queue=2, max_wait_ms=3000, max_batch=8) as (url, _, _):
        first: list[httpx.Response] = []
        t = threading.Thread(
            target=lambda: first.append(httpx.post(f"{url}/v1/score", json=items, timeout=60))
        )
        t.start()
        _wait_queued(url, 2)  # the first request's two answers fill the queue while it waits for more
        r = httpx.post(f"{url}/v1/score", json=items[0])
        t.join()
    assert (
        r.status_code == 503 and int(r.headers["Retry-After"]) >= 1 and "queue is full" in r.json()["error"]
    )
    assert first[0].status_code == 200 and len(first[0].json()["results"]) == 2


@pytest.mark.slow
def test_concurrent_requests_share_a_forward_and_equal_unbatched(detector, serve):
    items = _items(4, 6)
    with serve(detector, max_wait_ms=2000, max_batch=6) as (url, _, app):
        out: dict[int, dict] = {}

        def post(i):
            out[i] = httpx.post(f"{url}/v1/score", json=items[i], timeout=60).json()["results"][0]

        threads = [threading.Thread(target=post, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        batches = app.state.queue.batches
    assert batches == 1  # six requests, one packed forward (the batch filled before the wait ended)
    for i, item in enumerate(items):
        want = detector.predict_text(item["context"], item["question"], item["answer"])
        assert out[i]["probability"] == pytest.approx(want.probability, abs=TOL)
        assert [(s["start"], s["end"]) for s in out[i]["spans"]] == [(s.start, s.end) for s in want.spans]


@pytest.mark.slow
def test_stream_endpoint_equals_halluprobe_stream(detector, serve, tmp_path, capsys, monkeypatch):
    from websockets.sync.client import connect

    rng = np.random.default_rng(5)
    context, question, answer = text(rng, 10), text(rng, 2), text(rng, 7)
    detector.save(tmp_path / "det")
    ext = detector.extractor()
    monkeypatch.setattr(Detector, "extractor", lambda self, device=None: ext)
    args = ["stream", str(tmp_path / "det"), "--context", context, "--question", question]
    assert main([*args, "--answer", answer, "--chunk", "2", "--json"]) == 0
    cli = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    with serve(detector) as (url, _, _), connect(url.replace("http", "ws") + "/v1/stream") as ws:
        ws.send(json.dumps({"context": context, "question": question}))
        events = []
        for chunk in stream_text_chunks(answer, 2):
            ws.send(json.dumps({"text": chunk}))
        ws.send(json.dumps({"done": True}))
        while (event := json.loads(ws.recv()))["event"] != "done":
            events.append(event)
        events.append(event)
    events = [e for e in events if e["event"] == "done" or e["tokens"]]  # the CLI prints no empty update
    assert [e["event"] for e in events] == [e["event"] for e in cli]
    for got, want in zip(events, cli, strict=True):
        for key in ("tokens", "token_ids", "answer_tokens", "label"):
            assert got.get(key) == want.get(key)
        assert got["probability"] == pytest.approx(want["probability"], abs=TOL)
        np.testing.assert_allclose(got.get("token_scores", []), want.get("token_scores", []), atol=TOL)


def test_stream_refuses_bad_messages(detector, serve):
    from websockets.sync.client import connect

    with serve(detector) as (url, _, _):
        with connect(url.replace("http", "ws") + "/v1/stream") as ws:
            ws.send(json.dumps({"answer": "w1"}))
            event = json.loads(ws.recv())
        assert event["event"] == "error" and event["message"].startswith("first message: context")
        with connect(url.replace("http", "ws") + "/v1/stream") as ws:
            ws.send(json.dumps({"context": "w1 w2"}))
            ws.send(json.dumps({"done": True}))
            event = json.loads(ws.recv())
        assert event == {"event": "error", "message": "the answer is empty: nothing to score"}


@pytest.mark.slow
def test_shutdown_finishes_the_requests_in_flight(detector, serve):
    item = _items(6, 1)[0]
    got: list[httpx.Response] = []
    with serve(detector, max_wait_ms=1500) as (url, server, _):
        t = threading.Thread(target=lambda: got.append(httpx.post(f"{url}/v1/score", json=item, timeout=60)))
        t.start()
        _wait_queued(url, 1)
        server.should_exit = True  # what SIGINT/SIGTERM does
        t.join()
    assert got[0].status_code == 200
    want = detector.predict_text(item["context"], item["question"], item["answer"])
    assert got[0].json()["results"][0]["probability"] == pytest.approx(want.probability, abs=TOL)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz")
