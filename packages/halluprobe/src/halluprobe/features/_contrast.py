"""Context contrast: how much the context raises the proxy's belief in each answer token.

For every answer token ``y_t`` a record can carry two log-probabilities: ``log q(y_t | context,
question, y_<t)`` from the recorded forward (the logit statistic ``answer_logprob``) and ``log q(y_t |
question, y_<t)`` from a second, plain forward of the same answer tokens after a prompt without the
context (`bare_prompt`). Their difference is the pointwise information the context gives the token:
near zero or negative where the answer says what the proxy would say without the context, large where
the context supports it. The second forward reads only the question and the answer, so it costs a
fraction of the first. The feature block ``C`` ([`halluprobe.blocks.CBlock`][]) reads the pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from halluprobe.features._records import ExampleRecord

CONTRAST_VERSION = 1
"""Version of the contrast forward (part of the extraction settings, so of every cache key)."""

SETTINGS_KEY = "contrast"
"""The key of the extraction settings that names the contrast forward."""


def contrast_settings() -> dict[str, Any]:
    """What the contrast part of a record depends on (besides the proxy and template)."""
    return {"version": CONTRAST_VERSION, "prompt": "question only"}


def bare_prompt(tokenizer: Any, question: str) -> list[int]:
    """Token ids of the chat prompt without the context: the question alone (a blank turn without one).

    Args:
        tokenizer: The proxy's tokenizer (with a chat template).
        question: The example's question; may be empty.
    """
    from flashstats_hf import format_prompt

    return format_prompt(tokenizer, "", question) if question else format_prompt(tokenizer, " ", "")


@torch.no_grad()
def bare_logprobs(model: Any, prompts: Sequence[list[int]], answers: Sequence[list[int]]) -> list[np.ndarray]:
    """``log q(y_t | prompt, y_<t)`` of every answer token, in one left-padded plain forward.

    Args:
        model: A Transformers causal LM (any attention implementation; nothing is recorded).
        prompts: ``B`` prompts (token ids, each non-empty).
        answers: ``B`` answers (token ids, each non-empty), read after their prompt.

    Returns:
        ``B`` arrays ``[A_b] float32``.
    """
    if len(prompts) != len(answers):
        raise ValueError(f"bare_logprobs needs one answer per prompt, got {len(prompts)} and {len(answers)}")
    if any(not p for p in prompts) or any(not a for a in answers):
        raise ValueError("bare_logprobs needs non-empty prompts and answers")
    if not prompts:
        return []
    dev = next(model.parameters()).device
    seqs = [list(p) + list(a) for p, a in zip(prompts, answers, strict=True)]
    width = max(map(len, seqs))
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, width - len(s) :] = torch.tensor(s)
        mask[b, width - len(s) :] = 1
    ids, mask = ids.to(dev), mask.to(dev)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    keep = max(map(len, answers)) + 1  # the logits that predict every answer token, and one more
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
    # [B, keep - 1, V]: row j predicts the token at position width - keep + 1 + j
    logp = torch.log_softmax(logits[:, :-1].float(), -1)
    target = ids[:, width - keep + 1 :]
    picked = logp.gather(-1, target[..., None])[..., 0].cpu().numpy()
    return [picked[b, keep - 1 - len(a) :].astype(np.float32) for b, a in enumerate(answers)]


class BareFollower:
    """The forward without the context, kept as a KV cache while an answer arrives token by token.

    What `bare_logprobs` gives for the whole answer, read incrementally: each `feed` runs the new tokens
    only, so following an answer of ``A`` tokens costs one pass over it, not one per update.

    Args:
        model: The proxy (a Transformers causal LM; nothing is recorded).
        prompt: The prompt without the context (`bare_prompt`; token ids, non-empty).
    """

    def __init__(self, model: Any, prompt: list[int]) -> None:
        from transformers import DynamicCache

        if not prompt:
            raise ValueError("BareFollower needs a non-empty prompt")
        self.model = model
        self.device = next(model.parameters()).device
        self.cache = DynamicCache()
        self._last = self._run(list(prompt), keep=1)  # [1, V]: the logits that predict the first answer token
        self._logprobs: list[np.ndarray] = []

    @torch.no_grad()
    def _run(self, ids: list[int], keep: int = 0) -> torch.Tensor:
        out = self.model(
            input_ids=torch.tensor([ids], device=self.device),
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=keep,
        )
        return out.logits[0].float()

    def feed(self, ids: Sequence[int]) -> np.ndarray:
        """Reads the next answer tokens; returns their ``[n] float32`` log-probabilities without context."""
        ids = [int(i) for i in ids]
        if not ids:
            return np.zeros(0, np.float32)
        logits = self._run(ids)  # [n, V]: row j predicts the token after ids[j]
        rows = torch.cat([self._last, logits[:-1]])  # the rows that predict ids
        self._last = logits[-1:]
        target = torch.tensor(ids, device=rows.device)[:, None]
        picked = torch.log_softmax(rows, -1).gather(-1, target)[:, 0].cpu().numpy().astype(np.float32)
        self._logprobs.append(picked)
        return picked

    @property
    def logprobs(self) -> np.ndarray:
        """``[A] float32``: the log-probabilities of every answer token read so far."""
        return np.concatenate(self._logprobs) if self._logprobs else np.zeros(0, np.float32)


def fill_contrast(
    records: Sequence[ExampleRecord],
    prompts: Sequence[list[int]],
    answer_ids: Sequence[list[int]],
    model: Any,
    bare: Sequence[np.ndarray] | None = None,
) -> list[ExampleRecord]:
    """The records with ``contrast`` ``[A, 2]``: each answer token's log-probability with and without context.

    The first column is the record's own ``answer_logprob`` (the recorded forward, with the context); the
    second comes from one plain forward of the answer tokens after their prompt without the context
    (`bare_prompt`).

    Args:
        records: Records with their logit statistics, in order.
        prompts: Each example's prompt without the context (token ids).
        answer_ids: The answer token ids of each example, as the recorded forward read them.
        model: The proxy.
        bare: Each answer's ``[A_b]`` log-probabilities without the context when they were read
            already (a `BareFollower`'s); None: one plain forward computes them.

    Raises:
        ValueError: the counts differ, an answer has another length than its record, or the records'
            log-probabilities were not computed (a forward without logits).
    """
    from flashstats_hf import LOGIT_STAT_NAMES

    if not len(records) == len(prompts) == len(answer_ids):
        raise ValueError(
            f"fill_contrast needs one prompt and one answer per record, got {len(records)} records, "
            f"{len(prompts)} prompts and {len(answer_ids)} answers"
        )
    col = LOGIT_STAT_NAMES.index("answer_logprob")
    for r, a in zip(records, answer_ids, strict=True):
        if r.answer_len != len(a):
            raise ValueError(f"record {r.id!r} has {r.answer_len} answer tokens, its answer ids {len(a)}")
        if r.token_logit.shape[0] != r.answer_len or not np.isfinite(r.token_logit[:, col]).all():
            raise ValueError(f"record {r.id!r} has no answer log-probabilities (a forward without logits)")
    if bare is None:
        bare = bare_logprobs(model, prompts, answer_ids)
    elif len(bare) != len(records) or any(len(b) != r.answer_len for b, r in zip(bare, records, strict=True)):
        raise ValueError(
            f"fill_contrast needs one [A] array of log-probabilities without the context per record, got "
            f"lengths {[len(b) for b in bare]} for answers of {[r.answer_len for r in records]} tokens"
        )
    return [
        replace(r, contrast=np.stack([r.token_logit[:, col].astype(np.float32), b], 1))
        for r, b in zip(records, bare, strict=True)
    ]
