"""Records of every frozen source (``prepare.py``) in one process, exported compactly for analysis.

Runs the product extraction (``ProxyExtractor`` + ``extract_records`` into a ``FeatureCache``, float32,
deterministic) once per source, then writes what the transfer analysis reads, in float16 except
the logit statistics, into a few ``.npz`` files small enough to bring back from a device machine:

- ``meta.npz``: ids, source, answer/prompt lengths, logit statistics ``[n, V, 4]``, induction scores;
- ``heads.npz``: pooled head statistics of the 32 strongest induction heads ``[n, 32, S, 4]``;
- ``lookback.npz``: the pooled lookback ratio of every head ``[n, NL*H, 4]``;
- ``sinks.npz``: the three largest sink values of every head ``[n, NL*H, 3]``;
- ``hidden.npz``: pooled hidden states ``[n, NH, 2, Dm]``.

Usage::

    python3 benchmarks/transfer/extract_device.py --data DATA --gguf MODEL.gguf --out OUT [--limit N]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

TOP_HEADS = 32


def main() -> None:
    import halubench_data as hd
    import torch
    from flashstats_hf import load_model
    from flashstats_hf.loading import dequantized_gguf
    from halluprobe import FeatureCache, ProxyExtractor, extract_records, induction_scores
    from halluprobe.blocks._induction import rank_heads
    from halluprobe.features._records import HEAD_STATS

    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/transfer-work"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True, warn_only=True)
    t0 = time.perf_counter()
    model, tok = load_model(dequantized_gguf(args.gguf), device=args.device)
    ext = ProxyExtractor(model, tok)
    ind = induction_scores(model)
    nl, nh = ind.shape
    top = rank_heads(ind, tuple(range(nl)))[:TOP_HEADS]
    log = {
        "device": str(torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"),
        "torch": torch.__version__,
        "load_seconds": time.perf_counter() - t0,
        "sources": {},
    }
    cols: dict[str, list] = {
        k: []
        for k in ("id", "source", "answer_len", "prompt_len", "logit", "heads", "lookback", "sinks", "hidden")
    }
    lb = HEAD_STATS.index("lookback_ratio")
    for path in sorted(args.data.glob("*.jsonl")):
        name = path.stem
        ds = hd.read_jsonl(path)
        examples = list(ds.examples)[: args.limit] if args.limit else list(ds.examples)
        cache = FeatureCache(args.work / name, ext.settings)
        t1 = time.perf_counter()
        recs = extract_records(
            examples, ext, cache, batch_size=args.batch_size, token_budget=16384, length=ext.length
        )
        secs = time.perf_counter() - t1
        log["sources"][name] = {"n": len(recs), "seconds": secs}
        print(name, len(recs), f"{secs:.1f}s", flush=True)
        for r in recs:
            hs = r.head_stats.reshape(nl * nh, *r.head_stats.shape[2:])
            cols["id"].append(r.id)
            cols["source"].append(name)
            cols["answer_len"].append(r.answer_len)
            cols["prompt_len"].append(r.prompt_len)
            cols["logit"].append(r.logit_pooled.astype(np.float32))
            cols["heads"].append(hs[top].astype(np.float16))
            cols["lookback"].append(hs[:, lb, :].astype(np.float16))
            cols["sinks"].append(r.sink_topk.reshape(nl * nh, -1)[:, :3].astype(np.float16))
            cols["hidden"].append(r.hidden_pooled.astype(np.float16))
    args.out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        args.out / "meta.npz",
        id=np.array(cols["id"]),
        source=np.array(cols["source"]),
        answer_len=np.array(cols["answer_len"]),
        prompt_len=np.array(cols["prompt_len"]),
        logit=np.stack(cols["logit"]),
        induction=ind,
        top_heads=np.array(top),
        head_stats=np.array(HEAD_STATS),
    )
    for k in ("heads", "lookback", "sinks", "hidden"):
        np.savez_compressed(args.out / f"{k}.npz", x=np.stack(cols[k]))
    log["total_seconds"] = time.perf_counter() - t0
    (args.out / "extract_log.json").write_text(json.dumps(log, indent=1))


if __name__ == "__main__":
    main()
