"""Extraction cost: our recorded forward vs the dense path that reads ``output_attentions``.

The paths run on the same examples, one at a time (batch 1), after two warm-up examples:

- ``plain``: the decoder body alone (SDPA), no statistics: the floor.
- ``ours``: :func:`flashstats_hf.record_forward` with every statistic family (T1 rows, T2 lookups with the
  BOS sink, T3 columns) on every layer, the logit statistics and the middle hidden layer.
- ``ours_graph`` (CUDA only): :class:`flashstats_hf.GraphedRecorder` with shape buckets of 128 tokens /
  64 answer tokens and the same outputs as ``ours`` (every attention family of every layer, the logit
  statistics, the middle hidden layer); each example is run once untimed first (capturing its bucket's
  graph when new), then timed as a replay.
- ``dense``: eager attention with ``output_attentions=True`` (every layer's ``[H, L, L]`` weights
  materialised), then the same kinds of statistics from the response rows (maximum weight, entropy,
  prompt mass, log-diagonal, previous-token weight, BOS weight, column means) and the LM head on the
  answer positions.

Time is wall-clock with device synchronisation; memory (CUDA only) is the peak allocated during the call
minus what was allocated before it (summed up by `halluprobe.evaluation._sections.cost_summary`).
"""

from __future__ import annotations

import time

import numpy as np
import torch


def _dense_stats(att, start: int) -> list[torch.Tensor]:
    out = []
    for w in att:  # [1, H, L, L]
        rows = w[0, :, start:, :].float()  # [H, R, L]
        r = rows.shape[1]
        ent = -(rows * rows.clamp_min(1e-30).log()).sum(-1)
        idx = torch.arange(r, device=rows.device)
        diag = rows[:, idx, start + idx].clamp_min(1e-30).log()
        prev = rows[:, idx, start + idx - 1]
        out.append(torch.stack([rows.amax(-1), ent, rows[..., :start].sum(-1), diag, prev, rows[..., 0]]))
        out.append(rows.mean(1))
    return out


def _timed(fn, device: str) -> tuple[float, float | None]:
    cuda = str(device).startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    with torch.no_grad():
        fn()
    if cuda:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() - base) if cuda else None
    return dt, peak


def measure_cost(test, folder, device: str, dtype, n: int) -> dict:
    """Seconds and peak extra memory per example of the three paths on ``n`` examples of ``test``.

    Returns:
        ``{"paths": {path: {"seconds_mean", "seconds_median", "peak_mib_mean", ...}}, "per_example": [...]}``.
    """
    from flashstats_hf import DEFAULT_REQUEST, format_example, load_model, record_forward
    from halluprobe.evaluation._sections import cost_summary

    model, tok = load_model(folder, device=device, dtype=dtype)
    body = model.model
    graphed = None
    if str(device).startswith("cuda"):
        from flashstats_hf.graphs import GraphedRecorder

        mid = int(model.config.num_hidden_layers) // 2
        graphed = GraphedRecorder(model, buckets=(128, 64), max_graphs=64, logits=True, hidden_layers=(mid,))
    examples = sorted(test.examples, key=lambda e: e.id)[: n + 2]
    rows = []
    for i, ex in enumerate(examples):
        ids, start = format_example(tok, ex.context, ex.question, ex.answer)
        x = torch.tensor([ids], device=device)
        mid = int(model.config.num_hidden_layers) // 2

        def ours(x=x, start=start, mid=mid):
            record_forward(
                model, x, response_start=start, request=DEFAULT_REQUEST, logits=True, hidden_layers=(mid,)
            )

        def plain(x=x):
            model.set_attn_implementation("sdpa")
            try:
                body(input_ids=x, use_cache=False)
            finally:
                model.set_attn_implementation("attnstats")

        def dense(x=x, start=start):
            model.set_attn_implementation("eager")
            try:
                out = body(input_ids=x, use_cache=False, output_attentions=True)
                _dense_stats(out.attentions, start)
                model.lm_head(out.last_hidden_state[:, start - 1 :]).float().log_softmax(-1)
            finally:
                model.set_attn_implementation("attnstats")

        def ours_graph(x=x, start=start):
            graphed(x, response_start=start)

        row = {"id": ex.id, "tokens": len(ids), "answer_tokens": len(ids) - start}
        paths = [("plain", plain), ("ours", ours), ("dense", dense)]
        if graphed is not None:
            ours_graph()  # capture (new bucket) or warm replay, untimed
            paths.insert(2, ("ours_graph", ours_graph))
        for name, fn in paths:
            row[f"{name}_s"], row[f"{name}_bytes"] = _timed(fn, device)
        if i >= 2:  # the first two warm up (kernel compilation, allocator)
            rows.append(row)
    toks = np.array([r["tokens"] for r in rows])
    return {
        "n": len(rows),
        "tokens_median": float(np.median(toks)),
        "tokens_max": int(toks.max()),
        "dtype": str(dtype),
        "paths": cost_summary(rows),
        "graph_buckets": None if graphed is None else [list(k) for k in graphed._graphs],
        "per_example": rows,
    }
