"""Fine-tuning the reader: adapters and token head trained together, early-stopped on validation.

The loss of one answer is its example loss, the binary cross-entropy of its pooled token logit
(`halluprobe.reader._model.pool_logits`, ``settings.pool``) against its label, plus
``settings.token_weight`` times its token loss, the mean binary cross-entropy of its token logits
against its token labels, where it has them (every supported answer; hallucinated answers with
annotated spans). Answers are weighted so that every source weighs the same and, within a source,
both labels weigh the same (`halluprobe.training._general.source_label_weights`).

Validation: after every ``1 / settings.evals_per_epoch`` of an epoch the validation answers are scored
under every pooling (`POOLS`), and the mean over sources of the per-source AUROC is kept; the best
evaluation's adapters and head are the result, and training stops after ``settings.patience``
evaluations without a better one. The pooling used to score is the one that was best there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from halluprobe.reader._data import ReaderRow, batches
from halluprobe.reader._model import (
    POOLS,
    AdapterSpec,
    ReaderHead,
    adapter_state,
    inject,
    peft_keys,
    pool_logits,
    token_logits,
)
from halluprobe.reader._settings import ReaderSettings

__all__ = ["ReaderFit", "ReaderSettings", "fit_reader", "score_rows"]


@dataclass
class ReaderFit:
    """What `fit_reader` returns: the best adapters and head, and how training went."""

    adapter: dict[str, torch.Tensor]
    """Adapter matrices of the best evaluation (`halluprobe.reader._model.adapter_state`)."""
    head: dict[str, torch.Tensor]
    """Token head weights of the best evaluation (``proj.weight: [1, Dm]``, ``proj.bias: [1]``)."""
    pool: str
    """The pooling that scored best on validation."""
    val_auroc: float
    """Mean per-source validation AUROC at the best evaluation, under ``pool``."""
    best_step: int
    """Optimiser steps taken when the best evaluation was made."""
    steps: int
    """Optimiser steps taken in all."""
    tokens: int
    """Training tokens read (padding excluded)."""
    seconds: float
    """Wall time of the training steps (evaluations excluded)."""
    history: list[dict] = field(default_factory=list)
    """One entry per evaluation: step, epoch, mean training loss since the last one, AUROC per pooling."""

    @property
    def tokens_per_second(self) -> float:
        """Training throughput (tokens read per second of training steps)."""
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


def _example_loss(
    z: torch.Tensor, row: ReaderRow, settings: ReaderSettings, device: torch.device
) -> torch.Tensor:
    """One answer's loss (module docstring) from its token logits ``z: [A]``."""
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    y = torch.tensor(float(row.label), device=device)
    loss = bce(pool_logits(z, settings.pool), y)
    if row.token_labels is not None and settings.token_weight > 0:
        labels = torch.as_tensor(row.token_labels, device=device)
        loss = loss + settings.token_weight * bce(z, labels)
    return loss


def score_rows(
    model: torch.nn.Module,
    head: ReaderHead,
    rows: Sequence[ReaderRow],
    device: torch.device,
    max_batch_tokens: int,
    max_rows: int | None = None,
) -> list[np.ndarray]:
    """``[A] float32`` token logits of every row (no gradient; batches by length; input order)."""
    out: list[np.ndarray] = [np.zeros(0, np.float32)] * len(rows)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for idx in batches([len(r.ids) for r in rows], max_batch_tokens, max_rows=max_rows):
            zs = token_logits(model, head, [(rows[i].ids, rows[i].start) for i in idx], device)
            for i, z in zip(idx, zs, strict=True):
                out[i] = z.float().cpu().numpy()
    model.train(was_training)
    return out


def pooled(logits: Sequence[np.ndarray], pool: str) -> np.ndarray:
    """``[n] float64`` answer logits of per-row token logits under ``pool``."""
    return np.array([float(pool_logits(torch.as_tensor(z, dtype=torch.float64), pool)) for z in logits])


def _validate(model, head, val: Sequence[ReaderRow], device, settings) -> dict[str, float]:
    from halluprobe.training._general import mean_source_auroc

    z = score_rows(model, head, val, device, settings.max_batch_tokens)
    y = np.array([r.label for r in val])
    src = np.array([r.source for r in val])
    return {p: float(mean_source_auroc(pooled(z, p), y, src)) for p in POOLS}


def _schedule(step: int, total: int, warmup: float) -> float:
    w = max(1, int(round(warmup * total)))
    return (step + 1) / w if step < w else max(0.0, (total - step) / max(1, total - w))


def fit_reader(
    model: Any,
    train: Sequence[ReaderRow],
    validation: Sequence[ReaderRow],
    settings: ReaderSettings,
    *,
    progress: Callable[[str], None] | None = None,
    bar: bool = False,
) -> ReaderFit:
    """Fine-tune adapters and a token head on ``train``, early-stopped on ``validation``.

    Args:
        model: The proxy (a causal LM; its weights stay frozen and unchanged: adapters are added in
            place while training and removed before returning).
        train: Training answers (both labels needed).
        validation: Validation answers (both labels needed in at least one source).
        settings: Hyperparameters.
        progress: Optional ``(message) -> None`` told about each evaluation.
        bar: Show a progress bar (stderr) with the loss and tokens per second.

    Returns:
        The `ReaderFit` of the best evaluation.
    """
    settings.check()
    _check_rows(train, "training")
    _check_rows(validation, "validation")
    torch.manual_seed(settings.seed)
    rng = np.random.default_rng(settings.seed)
    device = next(model.parameters()).device
    previous_attention = model.config._attn_implementation
    model.set_attn_implementation("sdpa")  # the statistics kernels take no gradient
    peft_model = inject(model, settings.adapter, settings.dropout)
    head = ReaderHead(int(model.config.hidden_size)).to(device)
    try:
        return _loop(peft_model, head, train, validation, settings, rng, device, progress, bar)
    finally:
        peft_model.unload()  # the proxy as it was: adapters out, its weights untouched
        model.set_attn_implementation(previous_attention)


def _check_rows(rows: Sequence[ReaderRow], what: str) -> None:
    labels = {r.label for r in rows}
    if not rows or not labels <= {0, 1} or len(labels) < 2:
        raise ValueError(f"the {what} answers need both labels (0 and 1), got {sorted(labels) or 'none'}")


def _loop(peft_model, head, train, validation, settings, rng, device, progress, bar) -> ReaderFit:
    from tqdm.auto import tqdm

    from halluprobe.training._general import source_label_weights

    weights = source_label_weights(np.array([r.label for r in train]), np.array([r.source for r in train]))
    per_epoch = batches([len(r.ids) for r in train], settings.max_batch_tokens)
    n_epoch = len(per_epoch)
    total = max(1, int(math.ceil(settings.epochs * n_epoch)))
    every = max(1, n_epoch // settings.evals_per_epoch)
    params = [p for p in peft_model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        [
            {"params": params, "lr": settings.learning_rate},
            {"params": head.parameters(), "lr": settings.head_learning_rate},
        ],
        weight_decay=0.0,
    )
    base = [g["lr"] for g in opt.param_groups]
    best: dict = {"score": -math.inf, "step": 0, "pool": settings.pool, "adapter": None, "head": None}
    history: list[dict] = []
    since, stale, tokens, seconds, losses = 0, 0, 0, 0.0, []
    order: list[list[int]] = []
    progress_bar = tqdm(total=total, desc="fine-tuning", unit="step", disable=not bar, dynamic_ncols=True)
    peft_model.train()
    for step in range(total):
        if not order:
            order = batches([len(r.ids) for r in train], settings.max_batch_tokens, rng)
        idx = order.pop()
        start = time.perf_counter()
        for g, lr in zip(opt.param_groups, base, strict=True):
            g["lr"] = lr * _schedule(step, total, settings.warmup)
        zs = token_logits(peft_model, head, [(train[i].ids, train[i].start) for i in idx], device)
        w = torch.as_tensor(weights[idx], dtype=torch.float32, device=device)
        each = torch.stack(
            [_example_loss(z, train[i], settings, device) for z, i in zip(zs, idx, strict=True)]
        )
        loss = (w * each).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds += time.perf_counter() - start
        tokens += int(sum(len(train[i].ids) for i in idx))
        losses.append(loss.item())
        progress_bar.update(1)
        progress_bar.set_postfix(
            loss=f"{np.mean(losses[-20:]):.3f}", tok_s=f"{tokens / max(seconds, 1e-9):.0f}"
        )
        since += 1
        if since < every and step != total - 1:
            continue
        since = 0
        aurocs = _validate(peft_model, head, validation, device, settings)
        pool = max(POOLS, key=lambda p: np.nan_to_num(aurocs[p], nan=-1.0))
        entry = {
            "step": step + 1,
            "epoch": (step + 1) / n_epoch,
            "train_loss": float(np.mean(losses)),
            **{f"val_auroc_{p}": aurocs[p] for p in POOLS},
        }
        history.append(entry)
        losses = []
        if progress is not None:
            progress(f"step {step + 1}/{total}: validation AUROC {aurocs[pool]:.3f} ({pool})")
        if np.nan_to_num(aurocs[pool], nan=-1.0) > best["score"]:
            best.update(
                score=aurocs[pool],
                step=step + 1,
                pool=pool,
                adapter=adapter_state(peft_model),
                head={k: v.detach().float().cpu().clone() for k, v in head.state_dict().items()},
            )
            stale = 0
        else:
            stale += 1
            if stale >= settings.patience:
                break
    progress_bar.close()
    return ReaderFit(
        best["adapter"],
        best["head"],
        best["pool"],
        float(best["score"]),
        best["step"],
        step + 1,
        tokens,
        seconds,
        history,
    )


def score_with_adapter(
    model: Any,
    spec: AdapterSpec,
    adapter: dict[str, torch.Tensor],
    head_state: dict[str, torch.Tensor],
    rows: Sequence[ReaderRow],
    max_batch_tokens: int,
) -> list[np.ndarray]:
    """Token logits of ``rows`` under an adapter, leaving ``model``'s weights as they were.

    The adapter is injected (not merged), the rows scored, and the adapter removed again, so one
    loaded proxy serves many fits (one per held-out source).
    """
    from peft import set_peft_model_state_dict

    device = next(model.parameters()).device
    previous = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    peft_model = inject(model, spec)
    try:
        set_peft_model_state_dict(peft_model, peft_keys(adapter))
        head = ReaderHead(int(model.config.hidden_size))
        head.load_state_dict({k: v.float() for k, v in head_state.items()})
        return score_rows(peft_model, head.to(device).eval(), rows, device, max_batch_tokens)
    finally:
        peft_model.unload()
        model.set_attn_implementation(previous)
