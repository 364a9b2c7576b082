"""GPU throughput of the scoring call behind ``halluprobe serve``, 512-token examples, SmolLM2 shape.

A SmolLM2-135M-shaped Llama with random weights (timing does not depend on the weights), bf16, and a
small A7H64 detector fitted on its own records. Each row is answers per second of the whole library
call that a served batch makes: the recorded forward, ``reduce_forward`` to records, and the
detector's scores. 'eager packed' is one packed forward of the batch (the server's path); 'graph' is
one CUDA-graph replay per example (`flashstats_hf.GraphedRecorder`). 'full' computes every statistic,
'reads' only what the A7H64 detector reads (the graph of 'reads' is captured on
`halluprobe.features._reads.stopped_proxy`, which ends the decoder stack after the last layer read,
as the eager path's early stop does). The 'forward only' rows time the recorded forward alone, so
the host's share (records and scores) is the difference.

'served call' rows time what ``halluprobe serve`` runs for a queue batch, ``pending_triples`` (the
recorded forward, records, the batch's scores, each token's text and offsets, spans), on text triples of
the same lengths, for the A7H64 detector and for the packaged detector (its probe and reads: the logit
statistics and a second forward without the context, no attention statistic). A word-level tokenizer with
a chat template stands in for SmolLM2's (the device machine has no weights); its 'forward only' row times
the detector's recorded forward of the same batch.

    python benchmarks/serve_gpu.py --out $OUT/serve_gpu
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import torch
from flashstats_hf import ATTN_IMPLEMENTATION, DEFAULT_REQUEST, GraphedRecorder, collate, record_forward
from halluprobe import Detector
from halluprobe.features._reads import complete, detector_reads, record_reads, stopped_proxy
from halluprobe.features._records import reduce_forward
from halluprobe.training._protocol import fit_blocks, make_blocks
from transformers import LlamaConfig, LlamaForCausalLM

HIDDEN = (15,)


def smollm2_shaped(device: str) -> LlamaForCausalLM:
    cfg = LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3, max_position_embeddings=8192, rope_theta=100000.0, tie_word_embeddings=True,
    )  # fmt: skip
    cfg._attn_implementation = ATTN_IMPLEMENTATION
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).to(device, torch.bfloat16 if device == "cuda" else torch.float32).eval()


def word_tokenizer(words: int = 40000):
    """A word-level tokenizer (``w0 w1 ...``) with a ChatML-like template: SmolLM2's stand-in."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    special = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>", "user", "assistant"]
    vocab = {w: i for i, w in enumerate([*special, *(f"w{i}" for i in range(words))])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>")
    fast.chat_template = (
        "{% for m in messages %}<|im_start|> {{ m['role'] }} {{ m['content'] }} <|im_end|> {% endfor %}"
        "{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
    )
    return fast


def served_rates(model, tokenizer, detectors: dict, n: int, length: int, answer: int, repeats: int,
                 dev: str = "cuda") -> dict:  # fmt: skip
    """Answers/s of ``pending_triples`` (the served call) and of the detector's forward alone."""
    import flashstats_hf
    from halluprobe.detectors._prediction import Item, pending_triples

    g = np.random.default_rng(2)

    def words(k: int) -> str:
        return " ".join(f"w{i}" for i in g.integers(0, 40000, k))

    context_words = length - answer - 16  # the template and the question take the rest
    triples = [(words(context_words), words(8), words(answer)) for _ in range(n)]
    real = flashstats_hf.load_model
    flashstats_hf.load_model = lambda proxy=None, device=None: (model, tokenizer)  # the stand-in proxy
    rates = {}
    try:
        for name, det in detectors.items():
            ext = det.extractor(dev)
            encoded = [ext.encode(Item(f"i{i}", *t)) for i, t in enumerate(triples)]
            fns = {
                f"served call, {name}": lambda det=det: pending_triples(
                    det, triples, device="cuda", batch_size=n
                ),
                f"served call, {name}, forward only": lambda ext=ext, enc=encoded: ext.forward(enc),
            }
            for key, fn in fns.items():
                fn()  # warm-up
                sync(dev)
                t = time.perf_counter()
                for _ in range(repeats):
                    fn()
                sync(dev)
                rates[key] = n * repeats / (time.perf_counter() - t)
            print(f"served {name}: {len(encoded[0][0])} tokens, {rates}", flush=True)
    finally:
        flashstats_hf.load_model = real
    return rates


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--answer", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/serve_gpu")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the eager paths")
    args = ap.parse_args()
    dev = args.device
    model = smollm2_shaped(dev)
    g = torch.Generator().manual_seed(1)
    start = args.length - args.answer
    examples = [
        (torch.randint(10, 49000, (args.length,), generator=g).tolist(), start) for _ in range(args.batch)
    ]
    batch = collate(examples, pad_token_id=0).to(dev)
    ids = [f"e{i}" for i in range(args.batch)]
    full_fs = record_forward(model, batch.input_ids, response_start=batch.response_start,
                             attention_mask=batch.attention_mask, logits=True,
                             hidden_layers=HIDDEN)  # fmt: skip
    recs = reduce_forward(full_fs, ids)
    y = np.arange(len(recs)) % 2
    heads = [4 * 9 + 3, 7 * 9 + 1, 9 * 9 + 5, 11 * 9 + 2, 13 * 9 + 7, 15 * 9 + 4, 15 * 9 + 8]
    half = len(recs) // 2
    fit = fit_blocks(
        make_blocks("A7H64", heads=heads, k=1), "A7H64", recs[:half], y[:half], recs[half:], y[half:]
    )
    det = Detector.from_probe(fit, hidden_layers=HIDDEN)
    reads = detector_reads(det, 30, 9)
    scored = tuple(range(30))

    def eager_full():
        fs = record_forward(model, batch.input_ids, response_start=batch.response_start,
                            attention_mask=batch.attention_mask, logits=True,
                            hidden_layers=HIDDEN)  # fmt: skip
        return det.score_records(reduce_forward(fs, ids))

    def eager_reads():
        return det.score_records(reduce_forward(record_reads(model, batch, reads, scored, HIDDEN), ids))

    graphs = (
        {}
        if dev == "cpu"
        else {
            "full": GraphedRecorder(
                model, request=DEFAULT_REQUEST, buckets=(64, 16), logits=True, hidden_layers=HIDDEN
            ),
            "reads": GraphedRecorder(
                stopped_proxy(model, reads),
                request=dataclasses.replace(DEFAULT_REQUEST, columns=reads.columns, lookups=reads.lookups),
                layers=reads.layers,
                buckets=(64, 16),
                logits=reads.logits,
                hidden_layers=reads.hidden_layers,
            ),
        }
    )
    tensors = [torch.tensor([e], device=dev) for e, _ in examples]

    def graphed(kind):
        def run():
            out = []
            for t, (_, s), i in zip(tensors, examples, ids, strict=True):
                fs = graphs[kind](t, response_start=s)
                if kind == "reads":
                    fs = complete(fs, scored, HIDDEN, 9, 576)
                out += reduce_forward(fs, [i])
            return det.score_records(out)

        return run

    def unscored(fn):
        def run():
            fn()  # the forward alone: nothing to compare

        return run

    def graphed_forward(kind):
        def run():
            for t, (_, s) in zip(tensors, examples, strict=True):
                graphs[kind](t, response_start=s)

        return run

    def eager_full_forward():
        record_forward(model, batch.input_ids, response_start=batch.response_start,
                       attention_mask=batch.attention_mask, logits=True, hidden_layers=HIDDEN)  # fmt: skip

    runs = {"eager packed, full": eager_full, "eager packed, reads": eager_reads}
    forwards = {"eager packed, full": eager_full_forward,
                "eager packed, reads": lambda: record_reads(model, batch, reads, scored, HIDDEN)}  # fmt: skip
    if dev != "cpu":
        for kind in ("full", "reads"):
            runs[f"graph per example, {kind}"] = graphed(kind)
            forwards[f"graph per example, {kind}"] = graphed_forward(kind)
    runs.update({f"{k}, forward only": unscored(fn) for k, fn in forwards.items()})
    ref = eager_full()
    rates, agree = {}, {}
    if dev == "cuda":
        import halluprobe

        served = {"A7H64": Detector.from_probe(fit, hidden_layers=HIDDEN), "packaged": halluprobe.load(None)}
        rates.update(
            served_rates(model, word_tokenizer(), served, args.batch, args.length, args.answer, args.repeats)
        )
    for name, fn in runs.items():
        got = fn()  # warm-up (captures the graphs)
        if got is not None:  # the forward-only rows are not scored
            agree[name] = float(np.abs(got - ref).max())
        sync(dev)
        t = time.perf_counter()
        for _ in range(args.repeats):
            fn()
        sync(dev)
        rates[name] = args.batch * args.repeats / (time.perf_counter() - t)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    gpu = torch.cuda.get_device_name() if dev == "cuda" else "CPU (dry run)"
    versions = {p: metadata.version(p) for p in ("torch", "triton", "transformers")}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "date",
                "gpu",
                "versions",
                "path",
                "batch",
                "length",
                "answer",
                "answers_per_s",
                "max_abs_diff_vs_eager_full",
            ]
        )
        for k, v in rates.items():
            w.writerow(
                [
                    when,
                    gpu,
                    versions,
                    k,
                    args.batch,
                    args.length,
                    args.answer,
                    f"{v:.1f}",
                    f"{agree[k]:.2e}" if k in agree else "",
                ]  # fmt: skip
            )
    lines = [f"# Served scoring throughput on {gpu}", "",
             f"{when}; {versions}; SmolLM2-135M-shaped Llama, random weights, bf16; {args.batch} examples of "
             f"{args.length} tokens ({args.answer} answer tokens); forward + records + A7H64 scores.", "",
             "| path | answers/s | max abs diff of p vs eager full |", "|---|---|---|"]  # fmt: skip
    lines += [f"| {k} | {v:.1f} | {f'{agree[k]:.1e}' if k in agree else ''} |" for k, v in rates.items()]
    lines.append("")
    for name in ("A7H64", "packaged"):
        if f"served call, {name}" in rates:
            share = rates[f"served call, {name}"] / rates[f"served call, {name}, forward only"]
            lines.append(f"served call, {name}: {share:.2f}x the forward-only rate (target >= 0.8x).")
    for kind in ("eager packed", "graph per example"):
        if f"{kind}, reads" in rates:
            whole = rates[f"{kind}, reads"] / rates[f"{kind}, full"]
            fwd = rates[f"{kind}, reads, forward only"] / rates[f"{kind}, full, forward only"]
            lines.append(f"{kind}: reads / full = {whole:.2f}x (forward only {fwd:.2f}x).")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
