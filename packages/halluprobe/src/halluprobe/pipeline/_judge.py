"""The proxy as an LLM judge in ``halluprobe transfer --judge``: the one module that imports halujudge.

halujudge is the optional extra ``halluprobe[judge]``; it never imports halluprobe.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from halubench_data import clikit


def _usage(condition: bool, message: str) -> None:
    if condition:
        raise clikit.UsageError(message)


def check_judge(judge: bool, templates: Sequence[str]) -> None:
    """``--judge`` and ``--judge-template``: halujudge installed, every template one it ships (no torch)."""
    _usage(bool(templates) and not judge, "--judge-template needs --judge")
    if not judge:
        return
    try:
        from halujudge import list_templates
    except ImportError:
        raise clikit.UsageError("--judge needs halujudge: pip install 'halluprobe[judge]'") from None
    bad = [n for n in templates if n not in list_templates()]
    _usage(
        bool(bad),
        f"--judge-template {bad[0]!r}: expected one of {', '.join(list_templates())}" if bad else "",
    )


def judge_scores(
    model: Any, tokenizer: Any, datasets: Sequence[Any], *, out: Path, templates: Sequence[str] = (),
    model_id: str = "default", batch_size: int = 8,
) -> dict[str, dict[str, float]]:  # fmt: skip
    """``{template: {example id: score}}`` of the proxy as an LLM judge, kept in ``out/cache.jsonl``.

    ``templates``: those to score (empty: every template halujudge ships).

    halujudge's score cache is keyed by model, template, example and prompt, so a rerun, or one that
    was stopped, scores only what is missing.
    """
    from halujudge import LLMJudge, ScoreCache, list_templates

    examples = [e for ds in datasets for e in ds]
    cache = ScoreCache(Path(out) / "cache.jsonl")
    scored = {}
    for name in templates or list_templates():
        judge = LLMJudge(model, tokenizer, name, model_id=model_id, batch_size=batch_size)
        clikit.status(f"judge template {name}: {len(examples)} examples")
        scores = judge.score(examples, cache=cache, progress=clikit.show_progress())
        scored[name] = {e.id: float(v) for e, v in zip(examples, scores, strict=True)}
    return scored
