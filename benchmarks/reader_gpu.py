"""The fine-tuned reader on a GPU: transfer folds, the packaged candidates, in-source, throughput.

Every part calls the package (`halluprobe.reader`); this script only orders them under a time budget
and writes what they return to ``--out``:

- ``folds``: one fine-tuning per held-out source over the frozen sources of
  ``benchmarks/transfer/prepare.py`` (`halluprobe.reader._transfer.fold_scores`) ->
  ``reader_scores.json``, which ``halluprobe transfer --reader-scores`` turns into table rows on a CPU.
- ``packaged``: the reader fitted on every source's training split (early-stopped on their validation
  splits), saved alone (``packaged_reader/``) and mixed with the overlap score (``packaged_oreader/``),
  each scored on every source's test split; answers per second of ``predict_batch`` and tokens per
  second of a forward without gradient beside the fine-tuning's -> ``packaged.json``.
- ``insource``: RAGTruth QA, fitted and scored within the source (answer AUROC, span F1), and the
  paper's probes on the frozen and on the adapted proxy (`halluprobe.reader._probes`) -> ``insource.json``.

Usage (a CUDA machine; the default proxy's GGUF must be findable, see benchmarks/README.md)::

    python3 benchmarks/reader_gpu.py --data DIR --out OUT --parts folds,packaged,insource --budget 560
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SOURCES = (
    "default", "ragtruth_qa", "ragtruth_summary", "ragtruth_data2txt", "faithbench", "wice", "lfqa",
    "claimverify", "expertqa",
)  # fmt: skip
"""The frozen sources, in the order of the committed transfer table."""
PROBES = ("A7", "A64", "H64", "L9", "A7H64")


def _load(data: Path, names) -> list:
    import halubench_data as hd

    return [e for n in names for e in hd.load(str(data / f"{n}.jsonl"))]


def _env() -> dict:
    import peft
    import torch
    import transformers
    import triton

    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__, "triton": triton.__version__, "transformers": transformers.__version__,
        "peft": peft.__version__,
    }  # fmt: skip


def part_folds(args) -> dict:
    from halluprobe.reader._settings import ReaderSettings
    from halluprobe.reader._transfer import fold_scores, held_out_aurocs, write_fold_scores

    settings = ReaderSettings(epochs=args.epochs)
    examples = _load(args.data, SOURCES)
    meta = {"settings": settings.as_dict(), "env": _env()}

    def keep(folds: dict) -> None:  # after every fold: a run cut short still brings its folds back
        write_fold_scores(args.out / "reader_scores.json", folds, meta)

    folds = fold_scores(
        examples, settings, proxy=args.proxy, device=args.device, progress=print, on_fold=keep
    )
    args.held_out = held_out_aurocs(examples, folds)
    print("held-out AUROC:", json.dumps(args.held_out), flush=True)
    out = {k: {m: v for m, v in f.items() if m != "scores"} for k, f in folds.items()}
    return {**out, "held_out_auroc": args.held_out}


def _val(rows):
    import numpy as np

    return np.array([e.split == "validation" for e in rows])


def _throughput(reader, examples, n: int = 256) -> dict:
    import numpy as np
    import torch

    triples = [(e.context, e.question, e.answer) for e in examples[:n]]
    reader.predict_batch(triples[:16], batch_size=16)  # warm
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    t0 = time.perf_counter()
    reader.predict_batch(triples, batch_size=16)
    sync()
    served = len(triples) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    scored = reader.token_logits(triples, batch_size=16)
    sync()
    seconds = time.perf_counter() - t0
    tokens = int(np.sum([len(ids) for ids, _, _ in scored]))
    return {
        "answers": len(triples), "predict_batch_answers_per_s": served,
        "forward_tokens_per_s": tokens / seconds, "forward_answers_per_s": len(triples) / seconds,
    }  # fmt: skip


def part_packaged(args) -> dict | str:
    best = max((v["mean"] for v in getattr(args, "held_out", {}).values()), default=float("inf"))
    if best < args.package_above:
        return f"skipped: the best held-out mean {best:.3f} is below {args.package_above}"

    from halluprobe.reader import Reader
    from halluprobe.reader._calibrate import rescored
    from halluprobe.reader._data import as_examples
    from halluprobe.reader._evaluate import evaluate_reader

    examples = _load(args.data, SOURCES)
    fit_rows = [e for e in examples if e.split in ("train", "validation")]
    reader = Reader(args.proxy, device=args.device, epochs=args.epochs).fit(
        fit_rows, validation=_val(fit_rows)
    )
    anchored = rescored(reader, [e for e in fit_rows if e.split == "validation"], anchor=True)
    out = {"training": reader.card_["training"], "sources": reader.card_["sources"]}
    tests = as_examples([e for e in examples if e.split == "test"], None, None)
    for name, r in (("packaged_reader", reader), ("packaged_oreader", anchored)):
        r.save(args.out / name)
        out[name] = {"validation": r.validation_, "info": r.info(),
                     "test": {s: evaluate_reader(r, [e for e in tests if e.source == s], n_bootstrap=200)
                              for s in SOURCES}}  # fmt: skip
    out["throughput"] = _throughput(reader, [e for e in examples if e.split == "test"])
    return out


def part_insource(args) -> dict:

    from halluprobe.reader import Reader
    from halluprobe.reader._data import as_examples
    from halluprobe.reader._evaluate import evaluate_reader
    from halluprobe.reader._probes import probe_comparison

    examples = _load(args.insource, ("ragtruth_qa",))
    fit_rows = [e for e in examples if e.split in ("train", "validation")]
    reader = Reader(args.proxy, device=args.device).fit(fit_rows, validation=_val(fit_rows))
    test = as_examples([e for e in examples if e.split == "test"], None, None)
    out = {"reader": evaluate_reader(reader, test), "validation": reader.validation_,
           "training": {k: v for k, v in reader.card_["training"].items() if k != "history"}}  # fmt: skip
    args.keep("insource", out)  # the reader's numbers come back even if the probes are cut short
    if time.monotonic() < args.deadline - 150:
        out["probes"] = probe_comparison(reader, examples, PROBES, device=args.device)
    else:
        out["probes"] = "skipped: not enough of the time budget left"
    return out


PARTS = {"folds": part_folds, "packaged": part_packaged, "insource": part_insource}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="the frozen sources (prepare.py's folder)")
    ap.add_argument("--insource", type=Path, default=None, help="folder with the full ragtruth_qa.jsonl")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--parts", default="folds,packaged,insource")
    ap.add_argument("--proxy", default=None, help="proxy (default: SmolLM2); a tiny folder for a CPU dry run")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--epochs", type=float, default=2.0, help="most passes of every fine-tuning (default 2)")
    ap.add_argument(
        "--package-above", type=float, default=-1.0,
        help="fit the packaged candidates only when the folds' best mean held-out AUROC reaches this",
    )  # fmt: skip
    ap.add_argument(
        "--budget", type=float, default=560.0, help="seconds; a part is started only with time left"
    )
    args = ap.parse_args()
    start = time.monotonic()  # the budget counts the imports of _env too
    args.deadline = start + args.budget
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"env": _env(), "parts": {}}

    def keep(name: str, value) -> None:  # write what a part has so far (a call cut short brings it back)
        report["parts"][name] = value
        (args.out / "reader_gpu.json").write_text(json.dumps(report, indent=1, default=float))

    args.keep = keep
    for name in args.parts.split(","):
        left = args.deadline - time.monotonic()
        if left < 120:
            keep(name, f"skipped: {left:.0f} s of the budget left")
            print(f"{name}: skipped, {left:.0f} s of the budget left", flush=True)
            continue
        t0 = time.monotonic()
        value = PARTS[name](args)
        report[f"{name}_seconds"] = round(time.monotonic() - t0, 1)
        keep(name, value)
        print(f"{name}: {report[f'{name}_seconds']} s", flush=True)


if __name__ == "__main__":
    main()
