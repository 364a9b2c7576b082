"""Load test of ``halluprobe serve`` on the CPU with SmolLM2, loopback only, bounded in count and time.

The packaged detector (``halluprobe.load()``, nothing fitted here) scores the ``--rows`` shortest
rows of ``--dataset`` (a halubench-data spec; their token lengths are reported).

1. Offline reference: ``halluprobe predict --input ROWS --json`` gives every row's probability and
   label; the offline rate is the same library call in process (``Detector.predict_batch``, the
   CLI's batch size 8, sequential), timed before and after the served phase (side by side in one
   run, so a change of machine load shows as a difference of the two).
2. ``halluprobe serve`` on a free 127.0.0.1 port; ``--clients`` threads send ``--requests``
   single-answer requests (rows cycled), stopping after ``--time-limit`` seconds. Each request must
   get exactly one 200 with one result whose probability and label equal the offline ones. RSS of
   the server is sampled at start and every 100 answers; load averages (``/proc/loadavg``) too.
3. A second server is SIGKILLed mid-load: answered requests must be correct, the others connection
   errors (no other status); the detector files and the proxy cache are unchanged and readable, and
   a restarted server answers correctly.

    uv run python benchmarks/serve_load.py --requests 2000 --out benchmarks/results/serve_load

``--abuse`` runs the bounded load-and-abuse test instead (`abuse`): it stops by itself within
``--abuse-seconds`` (at most 300) and talks to 127.0.0.1 alone.

    uv run python benchmarks/serve_load.py --abuse --out benchmarks/results/serve_abuse
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
TOL = 1e-4
WARM = 100
"""RSS 'after warm-up' is taken after this many answers; growth is judged from there on."""


def short_rows(spec: str, n: int) -> tuple[list[dict], list[int]]:
    """The ``n`` shortest rows of ``spec`` (by formatted tokens) and their token counts."""
    import halluprobe
    from flashstats_hf import format_example
    from halubench_data import load

    tok = halluprobe.load().extractor("cpu").tokenizer
    scored = []
    for e in load(spec).examples:
        if not e.answer.strip():
            continue
        scored.append((len(format_example(tok, e.context, e.question, e.answer)[0]), e.id, e))
    scored.sort(key=lambda x: (x[0], x[1]))
    rows = [
        {"id": e.id, "context": e.context, "question": e.question, "answer": e.answer} for _, _, e in scored
    ]
    return rows[:n], [t for t, _, _ in scored[:n]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    port: int, max_batch: int, max_wait_ms: float, extra: tuple[str, ...] = ("--max-queue", "512"),
    limit: float = 600,
) -> subprocess.Popen:  # fmt: skip
    """``halluprobe serve`` (the packaged detector) on 127.0.0.1:port, once /healthz answers."""
    cmd = [sys.executable, "-m", "halluprobe", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--device", "cpu", "--max-wait-ms", str(max_wait_ms), "--max-batch", str(max_batch),
           *extra]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
        if proc.poll() is not None:
            raise RuntimeError(proc.stderr.read().decode() if proc.stderr else "server exited")
    raise RuntimeError("server did not start")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def load(url: str, rows: list[dict], n: int, clients: int, until: float, on_done=None) -> list[dict]:
    """Up to ``n`` requests from ``clients`` threads, none started after ``until`` (monotonic).

    One record per request sent: its index, row, status, latency and body (or the transport error).
    """
    lock = threading.Lock()
    nxt = iter(range(n))
    out: list[dict] = []

    def client():
        with httpx.Client(timeout=1800) as c:
            while True:
                with lock:
                    i = next(nxt, None) if time.monotonic() < until else None
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


def correct(rec: dict, ref: list[dict]) -> bool:
    """A 200 with exactly one result whose probability and label equal the offline ones."""
    if rec["status"] != 200 or len(rec["body"].get("results", [])) != 1:
        return False
    got, want = rec["body"]["results"][0], ref[rec["row"]]
    return abs(got["probability"] - want["probability"]) <= TOL and got["label"] == want["label"]


def digest(paths: list[Path]) -> dict[str, str]:
    """SHA-256 of every file under ``paths``."""
    out = {}
    for root in paths:
        for p in sorted(root.rglob("*")) if root.is_dir() else [root]:
            if p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def offline_rate(det, triples: list[tuple[str, str, str]]) -> float:
    """Answers per second of ``predict_batch`` (batch 8, what ``predict --input`` runs) on ``triples``."""
    t = time.perf_counter()
    det.predict_batch(triples, device="cpu", batch_size=8)
    return len(triples) / (time.perf_counter() - t)


def served_phase(args, rows: list[dict], ref: list[dict]) -> dict:
    """Phase 2: the load, with the server's RSS and the load averages every 100 answers."""
    port = free_port()
    server = start_server(port, args.max_batch, args.max_wait_ms)
    rss = {0: rss_mib(server.pid)}
    loads = {0: loadavg()}

    def sample(done: int) -> None:
        if done % 100 == 0:
            rss[done], loads[done] = rss_mib(server.pid), loadavg()

    t = time.perf_counter()
    until = time.monotonic() + args.time_limit
    recs = load(f"http://127.0.0.1:{port}", rows, args.requests, args.clients, until, sample)
    wall = time.perf_counter() - t
    rss[len(recs)] = rss_mib(server.pid)
    server.send_signal(signal.SIGINT)  # graceful: the requests in flight are finished
    server.wait(600)
    lat = np.array([r["latency"] for r in recs])
    warm = max((k for k in rss if 0 < k <= WARM), default=None)
    return {
        "requests_sent": len(recs),
        "served_answers_per_s": round(len(recs) / wall, 3),
        "served_wall_s": round(wall, 1),
        "p50_latency_s": round(float(np.percentile(lat, 50)), 3),
        "p95_latency_s": round(float(np.percentile(lat, 95)), 3),
        "rss_start_mib": round(rss[0], 1),
        f"rss_after_{warm}_mib": round(rss[warm], 1) if warm else "n/a",
        "rss_end_mib": round(rss[len(recs)], 1),
        "rss_growth_after_warm_mib": round(rss[len(recs)] - rss[warm], 1) if warm else "n/a",
        "exactly_one_response_per_request": sorted(r["i"] for r in recs) == list(range(len(recs))),
        "correct_responses": sum(correct(r, ref) for r in recs),
        "wrong_or_failed": sum(not correct(r, ref) for r in recs),
        "server_exit_code_after_sigint": server.returncode,
        "_rss": rss,
        "_loads": loads,
    }


def kill_phase(args, rows: list[dict], ref: list[dict], on_disk: list[Path], before: dict) -> dict:
    """Phase 3: SIGKILL a server mid-load, check the files, restart it and check its answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(port, args.max_batch, args.max_wait_ms)
    killed = threading.Event()
    kill_at = max(2, min(args.max_batch, args.kill_requests // 4))

    def kill(done: int) -> None:
        if done >= kill_at and not killed.is_set():
            killed.set()
            os.kill(server.pid, signal.SIGKILL)

    krecs = load(url, rows, args.kill_requests, min(8, args.clients), time.monotonic() + 1800, kill)
    server.wait(60)
    intact = digest(on_disk) == before
    server = start_server(port, args.max_batch, args.max_wait_ms)
    after = load(url, rows, 16, 4, time.monotonic() + 1800)
    server.send_signal(signal.SIGINT)
    server.wait(600)
    from flashstats_hf.loading import cache_root

    return {
        "kill_requests_sent": len(krecs),
        "kill_answered_correct": sum(correct(r, ref) for r in krecs),
        "kill_connection_errors": sum(r["status"] is None for r in krecs),
        "kill_wrong_or_other_status": sum(r["status"] is not None and not correct(r, ref) for r in krecs),
        "files_intact_after_kill": intact,
        "cache_digests_readable": all(
            isinstance(json.loads(p.read_text()), dict) for p in (cache_root() / "digests").glob("*.json")
        ),
        "restart_correct": f"{sum(correct(r, ref) for r in after)}/{len(after)}",
        "files_intact_at_end": digest(on_disk) == before,
    }


def write_report(args, results: dict, loads: dict[str, str]) -> None:
    """The Markdown table and the long CSV of what is known so far (rewritten after every phase)."""
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
         if ln.startswith("model name")), platform.machine(),
    )  # fmt: skip
    machine = f"{cpu}, {os.cpu_count()} cores"
    versions = {p: metadata.version(p) for p in ("halluprobe", "torch", "transformers", "fastapi", "uvicorn")}
    table = {k: v for k, v in results.items() if not k.startswith("_")}
    rss, series_loads = results.get("_rss", {}), results.get("_loads", {})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["date", "machine", "versions", "metric", "value"])
        rows = [*table.items(), *((f"rss_mib_at_{k}", round(v, 1)) for k, v in sorted(rss.items())),
                *((f"loadavg_at_{k}", v) for k, v in sorted(series_loads.items())),
                *((f"loadavg_{k}", v) for k, v in loads.items())]  # fmt: skip
        for k, v in rows:
            w.writerow([when, machine, json.dumps(versions), k, v])
    command = "uv run python benchmarks/serve_load.py " + " ".join(sys.argv[1:])
    series = ", ".join(f"{k}: {v:.0f}" for k, v in sorted(rss.items()))
    averages = "; ".join(f"{k} {v}" for k, v in loads.items())
    lines = [
        "# halluprobe serve under load (CPU, loopback)", "",
        f"{when}; {machine}, shared with other jobs; {versions}.", "",
        f"Command: `{command}`", "",
        f"The packaged detector (`halluprobe.load()`, SmolLM2-135M-Instruct proxy) on the {args.rows} "
        f"shortest rows of `{args.dataset}` ({results.get('row_tokens_min_median_max')} formatted tokens, "
        f"min/median/max); server flags `--max-batch {args.max_batch} --max-wait-ms {args.max_wait_ms:g}`; "
        f"served phase bounded by {args.time_limit:g} s.", "",
        "| metric | value |", "|---|---|",
        *(f"| {k} | {v} |" for k, v in table.items()), "",
        f"Server RSS (MiB) by answers done: {series or 'not measured yet'}.", "",
        f"Load averages (1, 5, 15 min) at each step: {averages}.",
    ]  # fmt: skip
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--rows", type=int, default=16, help="distinct rows (the shortest of --dataset)")
    ap.add_argument("--dataset", default="default", help="halubench-data spec of the rows")
    ap.add_argument("--max-batch", type=int, default=16)
    ap.add_argument("--max-wait-ms", type=float, default=10.0)
    ap.add_argument("--time-limit", type=float, default=3600, help="seconds of the served phase at most")
    ap.add_argument("--kill-requests", type=int, default=64)
    ap.add_argument("--out", default="benchmarks/results/serve_load")
    ap.add_argument("--abuse", action="store_true", help="the bounded load-and-abuse run instead")
    ap.add_argument("--abuse-seconds", type=float, default=280, help="its budget (at most 300 s)")
    args = ap.parse_args()
    if args.abuse:
        sys.path.insert(0, str(Path(__file__).parent))  # _serve_abuse beside this script
        servers: list[subprocess.Popen] = []
        try:
            return abuse(args, servers)
        finally:
            for proc in servers:  # whatever failed, no server is left running
                if proc.poll() is None:
                    proc.kill()
    import halluprobe
    from flashstats_hf.loading import cache_root
    from halluprobe.detectors._default import packaged_path

    loads = {"start": loadavg()}
    rows, tokens = short_rows(args.dataset, args.rows)
    rows_file = Path(tempfile.mkdtemp(prefix="serve_load_")) / "rows.jsonl"
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # digests/ of the cache is left out: every process that loads a model may add a memo there (each is
    # checked to parse after the kill instead)
    on_disk = [packaged_path(), *(p for p in cache_root().iterdir() if p.name != "digests"), rows_file]
    before = digest(on_disk)

    # phase 1: the offline reference (the CLI) and the offline rate (the same call in process)
    cmd = [
        sys.executable,
        "-m",
        "halluprobe",
        "predict",
        "--input",
        str(rows_file),
        "--json",
        "--device",
        "cpu",
    ]
    cli = subprocess.run(cmd, capture_output=True, text=True, check=True)
    offline = {(d := json.loads(line))["id"]: d for line in cli.stdout.splitlines()}
    ref = [offline[r["id"]] for r in rows]
    det = halluprobe.load()
    triples = [(r["context"], r["question"], r["answer"]) for r in rows]
    det.predict_batch(triples[:2], device="cpu")  # load and warm up
    results: dict = {
        "requests_asked": args.requests, "clients": args.clients, "distinct_rows": len(rows),
        "row_tokens_min_median_max": f"{min(tokens)}/{int(np.median(tokens))}/{max(tokens)}",
        "offline_answers_per_s_before": round(offline_rate(det, triples), 3),
    }  # fmt: skip
    loads["after_offline"] = loadavg()

    results.update(served_phase(args, rows, ref))
    loads["after_served"] = loadavg()
    results["offline_answers_per_s_after"] = round(offline_rate(det, triples), 3)
    loads["after_offline_2"] = loadavg()
    del det
    mean = (results["offline_answers_per_s_before"] + results["offline_answers_per_s_after"]) / 2
    results["served_vs_offline_mean"] = round(results["served_answers_per_s"] / mean, 3)
    write_report(args, results, loads)

    results.update(kill_phase(args, rows, ref, on_disk, before))
    loads["end"] = loadavg()
    write_report(args, results, loads)


ABUSE_LIMITS = {"max_queue": 16, "max_items": 8, "max_body_bytes": 65536, "max_streams": 4}
"""Server limits of the abuse run: small, so that the hostile cases reach them (one stream slot more
than the three hostile threads use at once)."""


def abuse(args, server: list[subprocess.Popen]) -> None:
    """The bounded load-and-abuse run: good clients whose answers must equal the offline ones, while
    threads replay every hostile case (`_serve_abuse.cases`), then a long stream that must keep
    answering pings, then SIGTERM. A watchdog ends everything at ``--abuse-seconds``; the server started
    is appended to ``server``, for the caller to stop whatever happens."""
    import halluprobe
    from _serve_abuse import (
        cases,
        long_stream_keeps_answering_pings,
        run_good,
        run_hostile,
        streams_over_the_limit,
    )

    budget = min(args.abuse_seconds, 300.0)
    start = time.monotonic()

    def watchdog() -> None:  # the run stops by itself, whatever hangs
        time.sleep(max(0.0, budget - 5))
        for proc in server:
            proc.kill()
        print(f"abuse run: {budget:g} s budget spent; stopped", file=sys.stderr, flush=True)
        os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()

    def say(what: str) -> None:
        print(f"[{time.monotonic() - start:5.0f} s] {what}", file=sys.stderr, flush=True)

    loads = {"start": loadavg()}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    limits = ABUSE_LIMITS
    extra = ("--max-queue", str(limits["max_queue"]), "--max-items", str(limits["max_items"]),
             "--max-body-bytes", str(limits["max_body_bytes"]), "--max-streams", str(limits["max_streams"]),
             "--header-timeout", "3", "--body-timeout", "3", "--stream-idle-timeout", "3")  # fmt: skip
    launcher = threading.Thread(
        target=lambda: server.append(start_server(port, args.max_batch, args.max_wait_ms, extra, budget))
    )
    launcher.start()  # the server loads its proxy while the reference is computed here
    det = halluprobe.load()
    rows, tokens = short_rows(args.dataset, args.rows)
    triples = [(r["context"], r["question"], r["answer"]) for r in rows]
    ref = [{"probability": p.probability, "label": p.label} for p in det.predict_batch(triples, device="cpu")]
    launcher.join()
    ready = time.monotonic() - start
    # the phases share what is left: load and abuse, the answers in flight, two stream checks, SIGTERM
    end = start + budget - 10
    until = time.monotonic() + max(30.0, 0.45 * (end - time.monotonic()))
    drained = min(until + 45, end - 45)
    named = cases(url, port, limits, rows[0])
    hostile: dict = {}
    keys = ("tries", "passes", "failures")
    worker = threading.Thread(
        target=lambda: hostile.update(zip(keys, run_hostile(named, until, drained), strict=True))
    )
    worker.start()
    say(f"load and abuse until +{until - start:.0f} s")
    good = run_good(url, rows, ref, until, args.clients, TOL, drained)
    worker.join(max(0.0, drained - time.monotonic()))
    busy, pings, how = "skipped (budget)", "skipped (budget)", ""
    if end - time.monotonic() > 40:
        say("streams over the limit")
        busy = str(streams_over_the_limit(url, limits["max_streams"]))
    if end - time.monotonic() > 30:
        say("a long-context stream")
        long_context = " ".join(r["context"] for r in rows)[:12000]  # some 2,500 tokens
        ok, how = long_stream_keeps_answering_pings(url, long_context, rows[0]["answer"], end - 20)
        pings = str(ok)
    after = run_good(url, rows, ref, time.monotonic() + 1, 1, TOL, end - 10)  # still right after it all
    say("SIGTERM")
    server[0].send_signal(signal.SIGTERM)
    try:
        code: int | str = server[0].wait(max(1.0, end - time.monotonic()))
    except subprocess.TimeoutExpired:
        code = "still draining at the budget (killed)"
        server[0].kill()
        server[0].wait(10)
    loads["end"] = loadavg()
    tries, passes = hostile.get("tries", {}), hostile.get("passes", {})
    results: dict = {
        "budget_s": budget, "server_ready_s": round(ready, 1), "distinct_rows": len(rows),
        "row_tokens_min_median_max": f"{min(tokens)}/{int(np.median(tokens))}/{max(tokens)}",
        **good,
        "hostile_tries": sum(tries.values()), "hostile_as_documented": sum(passes.values()),
        **{f"case: {k}": f"{passes[k]}/{n}" for k, n in sorted(tries.items())},
        "case: a stream over --max-streams -> 1013": busy,
        "case: a long-context stream answers pings": f"{pings} {how}".strip(),
        "good_after_abuse": f"{after['good_correct']}/{after['good_requests']}",
        "server_exit_after_sigterm": code, "total_s": round(time.monotonic() - start, 1),
    }  # fmt: skip
    results["failures"] = "; ".join(hostile.get("failures", [])) or "none"
    write_abuse_report(args, results, loads)


def write_abuse_report(args, results: dict, loads: dict[str, str]) -> None:
    """The Markdown table and the long CSV of the abuse run."""
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.machine())  # fmt: skip
    machine = f"{cpu}, {os.cpu_count()} cores"
    versions = {p: metadata.version(p) for p in ("halluprobe", "torch", "fastapi", "uvicorn", "websockets")}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["date", "machine", "versions", "metric", "value"])
        for k, v in [*results.items(), *((f"loadavg_{k}", v) for k, v in loads.items())]:
            w.writerow([when, machine, json.dumps(versions), k, v])
    command = "uv run python benchmarks/serve_load.py " + " ".join(sys.argv[1:])
    lines = [
        "# halluprobe serve under load and abuse (CPU, loopback)", "",
        f"{when}; {machine}, shared with other jobs; {versions}.", "",
        f"Command: `{command}`", "",
        f"The packaged detector on the {args.rows} shortest rows of `{args.dataset}`; {args.clients} good "
        f"clients send single answers, which must equal the offline `predict_batch` answers (503 is "
        f"retried after Retry-After), while three threads replay every hostile case. Server limits: "
        f"{ABUSE_LIMITS}, 3 s header, body and stream-idle timeouts, `--max-batch {args.max_batch} "
        f"--max-wait-ms {args.max_wait_ms:g}`. A case passes when the server answers as documented "
        "(status and `{\"error\"}`, or close code and `error` event).", "",
        "| metric | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in results.items()), "",
        "Load averages (1, 5, 15 min): " + "; ".join(f"{k} {v}" for k, v in loads.items()) + ".",
    ]  # fmt: skip
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
