"""Load test of ``halluprobe serve`` on the CPU with SmolLM2, loopback only, bounded in count and time.

1. Fits a small A7H64 detector on RAGTruth-QA rows (the detector's quality is not measured here) and
   saves it; takes ``--rows`` held-out rows as the requests' answers.
2. Offline reference: ``halluprobe predict DET --input ROWS --json`` (its probabilities), and the
   throughput of the same call in process (``Detector.predict_batch``, batch 8) without the model load.
3. Starts ``halluprobe serve DET`` on a free 127.0.0.1 port; ``--clients`` threads send ``--requests``
   single-answer requests (rows cycled); latency per request, RSS of the server after the first 100
   and at the end; every request must get exactly one 200 whose probability equals the offline one.
4. SIGKILLs a second server mid-load: clients must see connection errors, never a wrong answer; a
   restarted server answers correctly and the detector files are byte-identical.

    uv run python benchmarks/serve_load.py --requests 2000 --out benchmarks/results/serve_load
"""

from __future__ import annotations

import argparse
import csv
import datetime
import hashlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from importlib import metadata
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "ragtruth"
TOL = 1e-4


def fit_detector(out: Path, n_fit: int, n_rows: int):
    """A small A7H64 detector on RAGTruth-QA train/validation rows; the shortest held-out test rows."""
    from flashstats_hf import load_model
    from halluprobe import Detector
    from halluprobe.features._extract import ProxyExtractor
    from halluprobe.training._protocol import fit_blocks, make_blocks
    from halubench_data import load

    ds = load(f"ragtruth-qa:{DATA}")
    model, tok = load_model(None, device="cpu")
    ext = ProxyExtractor(model, tok)
    train = sorted(ds.split("train"), key=lambda e: len(e.context))[:n_fit]
    val = sorted(ds.split("validation"), key=lambda e: len(e.context))[: n_fit // 2]
    recs = {}
    for part in (train, val):
        for i in range(0, len(part), 8):
            batch = part[i : i + 8]
            recs.update({r.id: r for r in ext(batch)})
    heads = [4 * 9 + 3, 7 * 9 + 1, 9 * 9 + 5, 11 * 9 + 2, 13 * 9 + 7, 15 * 9 + 4, 15 * 9 + 8]  # 9 heads/layer
    fit = fit_blocks(make_blocks("A7H64", heads=heads, k=1), "A7H64",
                     [recs[e.id] for e in train], np.array([e.label for e in train]),
                     [recs[e.id] for e in val], np.array([e.label for e in val]))  # fmt: skip
    Detector(fit, None, None, ext.hidden_layers).save(out)
    rows = sorted(ds.split("test"), key=lambda e: len(e.context) + len(e.answer))[:n_rows]
    return [{"id": e.id, "context": e.context, "question": e.question, "answer": e.answer} for e in rows]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(det: Path, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "halluprobe", "serve", str(det), "--port", str(port), "--device", "cpu",
           "--max-wait-ms", "10", "--max-batch", "16", "--max-queue", "512"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read().decode())
    raise RuntimeError("server did not start")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load(url: str, rows: list[dict], n: int, clients: int, on_done=None) -> list[dict]:
    """``n`` requests from ``clients`` threads; one record per request (status, latency, result/error)."""
    lock = threading.Lock()
    nxt = iter(range(n))
    out: list[dict] = []

    def client():
        with httpx.Client(timeout=120) as c:
            while True:
                with lock:
                    i = next(nxt, None)
                if i is None:
                    return
                row = rows[i % len(rows)]
                body = {k: row[k] for k in ("context", "question", "answer")}
                t = time.perf_counter()
                try:
                    r = c.post(f"{url}/v1/score", json=body)
                    rec = {"i": i, "row": i % len(rows), "status": r.status_code, "body": r.json()}
                except httpx.TransportError as exc:
                    rec = {"i": i, "row": i % len(rows), "status": None, "error": type(exc).__name__}
                rec["latency"] = time.perf_counter() - t
                with lock:
                    out.append(rec)
                    if on_done is not None:
                        on_done(len(out))

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def wrong_of(recs: list[dict], ref: list[float]) -> list[dict]:
    """The answered requests whose probability differs from the offline one."""
    return [
        r
        for r in recs
        if r["status"] == 200 and abs(r["body"]["results"][0]["probability"] - ref[r["row"]]) > TOL
    ]


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--fit", type=int, default=48)
    ap.add_argument("--out", default="benchmarks/results/serve_load")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="serve_load_"))
    det = work / "detector"
    rows = fit_detector(det, args.fit, args.rows)
    with open(work / "rows.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    before = digest(det)

    # offline: the CLI's answers, and the in-process throughput of the same library call
    cmd = [
        sys.executable,
        "-m",
        "halluprobe",
        "predict",
        str(det),
        "--input",
        str(work / "rows.jsonl"),
        "--json",
    ]
    cli = subprocess.run([*cmd, "--device", "cpu"], capture_output=True, text=True, check=True)
    offline = {json.loads(line)["id"]: json.loads(line)["probability"] for line in cli.stdout.splitlines()}
    ref = [offline[r["id"]] for r in rows]
    from halluprobe import Detector

    d = Detector.load(det)
    triples = [(r["context"], r["question"], r["answer"]) for r in rows]
    d.predict_batch(triples[:1], device="cpu")  # load and warm up
    t = time.perf_counter()
    d.predict_batch(triples, device="cpu", batch_size=8)
    offline_rate = len(rows) / (time.perf_counter() - t)
    del d

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(det, port)
    rss = {"start": rss_mib(server.pid)}
    warm = min(100, args.requests // 4)  # RSS after the first 100 requests (fewer in a short run)

    def sample(done: int) -> None:
        if done == warm:
            rss["after_warm"] = rss_mib(server.pid)

    t = time.perf_counter()
    recs = load(url, rows, args.requests, args.clients, sample)
    wall = time.perf_counter() - t
    rss["end"] = rss_mib(server.pid)
    server.send_signal(signal.SIGINT)
    server.wait(120)
    ok = [r for r in recs if r["status"] == 200 and len(r["body"]["results"]) == 1]
    wrong = wrong_of(ok, ref)
    lat = np.array([r["latency"] for r in recs])
    served_rate = len(recs) / wall

    # SIGKILL mid-load, then restart
    port2 = free_port()
    url2 = f"http://127.0.0.1:{port2}"
    server = start_server(det, port2)
    killed = threading.Event()
    n_kill = min(400, args.requests)

    def kill(done: int) -> None:
        if done == max(2, n_kill // 8) and not killed.is_set():
            killed.set()
            os.kill(server.pid, signal.SIGKILL)

    krecs = load(url2, rows, n_kill, min(8, args.clients), kill)
    server.wait(30)
    k_ok = [r for r in krecs if r["status"] == 200]
    k_wrong = wrong_of(k_ok, ref)
    k_conn = [r for r in krecs if r["status"] is None]
    k_other = [r for r in krecs if r["status"] not in (None, 200)]
    server = start_server(det, port2)
    after = load(url2, rows, min(16, args.requests), 4)
    server.send_signal(signal.SIGINT)
    server.wait(120)
    a_ok = sum(r["status"] == 200 for r in after) - len(wrong_of(after, ref))
    intact = digest(det) == before

    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.machine()} CPU, {os.cpu_count()} cores"
    versions = {p: metadata.version(p) for p in ("halluprobe", "torch", "transformers", "fastapi", "uvicorn")}
    rows_out = {
        "requests": args.requests,
        "clients": args.clients,
        "distinct_rows": len(rows),
        "offline_answers_per_s": round(offline_rate, 3),
        "served_answers_per_s": round(served_rate, 3),
        "served_vs_offline": round(served_rate / offline_rate, 3),
        "p50_latency_s": round(float(np.percentile(lat, 50)), 3),
        "p95_latency_s": round(float(np.percentile(lat, 95)), 3),
        "rss_start_mib": round(rss["start"], 1),
        f"rss_after_{warm}_mib": round(rss.get("after_warm", float("nan")), 1),
        "rss_end_mib": round(rss["end"], 1),
        "responses_200": len(ok),
        "wrong_answers": len(wrong),
        "missing_or_failed": args.requests - len(ok),
        "kill_requests": len(krecs),
        "kill_answered": len(k_ok),
        "kill_wrong": len(k_wrong),
        "kill_connection_errors": len(k_conn),
        "kill_other_status": len(k_other),
        "restart_correct": f"{a_ok}/{len(after)}",
        "detector_files_intact": intact,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["date", "machine", "versions", "metric", "value"])
        for k, v in rows_out.items():
            w.writerow([when, machine, json.dumps(versions), k, v])
    lines = [
        "# halluprobe serve under load (CPU, loopback)", "",
        f"{when}; {machine} (shared with other jobs); {versions}; SmolLM2-135M-Instruct proxy; a small A7H64 "
        f"detector fitted by the benchmark on {args.fit} RAGTruth-QA rows; requests cycle over the "
        f"{len(rows)} shortest RAGTruth-QA test rows; server flags --max-wait-ms 10 --max-batch 16.", "",
        "| metric | value |", "|---|---|",
    ]  # fmt: skip
    lines += [f"| {k} | {v} |" for k, v in rows_out.items()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
