"""One decode step on a static cache, captured in a CUDA graph and replayed per token (or chunk).

[`GraphedDecodeStep`][flashstats_hf.GraphedDecodeStep] runs ``model(next_token)`` against a
`transformers.StaticCache`, with or without an active [`flashstats_hf.CachedRecorder`][]. The first calls run
eagerly (they are real steps: autotuning, compilation, lazy allocation), then one is captured and every later
call copies the token into the graph's static input and replays it. Everything a step reads that changes from
step to step lives on the device: the cache length (the cache's own counter), the position ids (computed in
the graph from it), the recorder's token count and answer slots. The host only counts.

Scope: batch of left-padded examples whose prompts end together; caches whose layers are all
full-attention ``StaticLayer`` (a sliding-window static layer keeps a host counter and changes code
path when it fills, so it cannot be replayed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from flashstats_hf.cached import CachedRecorder

if TYPE_CHECKING:
    from transformers import StaticCache

WARMUP_STEPS = 2
"""Eager steps before the capture (autotuning and first-call allocations happen outside the graph)."""


class GraphedDecodeStep:
    """Captured single-token decode steps of ``model`` on a static ``cache``.

    Args:
        model: the causal LM, on a CUDA device, in eval mode.
        cache: a ``transformers.StaticCache`` that already holds the prompt (after the prefill).
        key_mask: [B, P] bool/int. Real tokens of the prompt (left padding = 0); later tokens are real.
        recorder: the active CachedRecorder that scores the steps, or None for plain decoding.
        capture: capture and replay (CUDA only); False runs every step eagerly through the same code
            (what the CPU tests check, and a reference for the captured steps).
        tokens_per_step: tokens ``q`` read per step: 1 for decoding, a chunk size to follow an answer
            that arrives in chunks of ``q`` tokens.

    Raises:
        ValueError: a cache with sliding-window layers, ``capture`` with a model not on CUDA.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        cache: StaticCache,
        key_mask: torch.Tensor,
        *,
        recorder: CachedRecorder | None = None,
        capture: bool = True,
        tokens_per_step: int = 1,
    ) -> None:
        dev = next(model.parameters()).device
        if capture and dev.type != "cuda":
            raise ValueError(f"GraphedDecodeStep(capture=True) needs a model on a CUDA device, got {dev}")
        if any(getattr(layer, "is_sliding", False) for layer in cache.layers):
            raise ValueError("GraphedDecodeStep needs a StaticCache without sliding-window layers")
        self.model, self.cache, self.recorder, self.device = model, cache, recorder, dev
        self.capture = capture
        if isinstance(tokens_per_step, bool) or not isinstance(tokens_per_step, int) or tokens_per_step < 1:
            raise ValueError(f"tokens_per_step must be a positive int, got {tokens_per_step!r}")
        self.q = tokens_per_step
        self.max_len = cache.get_max_length()
        b, p = key_mask.shape
        self.real = torch.ones(b, self.max_len, dtype=torch.bool, device=dev)  # [B, Lc]
        self.n_pad = torch.zeros(b, 1, dtype=torch.long, device=dev)  # [B, 1]
        self.tokens = self.prompt = p  # tokens in the cache (host count), padded prompt length
        self.steps = 0
        self.restart(key_mask)
        self.slots = torch.arange(self.max_len, device=dev)
        self.ids = torch.zeros(b, self.q, dtype=torch.long, device=dev)
        self.rows = torch.arange(self.q, device=dev)
        # one captured step per kernel path: the recorder's kernels read a key mask only for a padded
        # prompt (``CachedRecorder.padded``; None without a recorder), so each path has its own graph
        self.graphs: dict[bool | None, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.warm: dict[bool | None, int] = {}  # eager steps run per path

    def restart(self, key_mask: torch.Tensor) -> None:
        """Follow a new prompt with the same captured step (no new warm-up or capture).

        Call it after ``cache.reset()``, the recorder's ``restart()`` and the new prefill. The prompt
        must have the padded length and batch of the first one; its padding is written in place. With
        a recorder, the first prompt with padding after prompts without (or the reverse) warms up and
        captures its own step once: the recorder's kernels read a key mask only when the prompt is
        padded. Both captured steps are kept.

        Args:
            key_mask: [B, P] bool/int. Real tokens of the new prompt (left padding = 0).
        """
        b, p = key_mask.shape
        if b != self.real.shape[0] or (self.steps and p != self.prompt):
            raise ValueError(
                f"key_mask must have shape [B, P] = [{self.real.shape[0]}, {self.prompt}] "
                f"(the captured step's batch and prompt), got {tuple(key_mask.shape)}"
            )
        self.prompt, self.tokens = p, p
        self.real.fill_(True)
        self.real[:, :p] = key_mask.to(self.device).bool()
        self.n_pad.copy_(p - self.real[:, :p].sum(1, keepdim=True))

    def _step(self) -> torch.Tensor:
        """The work of one step, from the static inputs to the static ``[B, V]`` logits.

        The mask is handed over prepared (``[B, 1, 1, Lc]`` bool, built here from the device length), so
        Transformers' mask builder, whose static-cache path is not written for capture, is skipped.
        """
        # tokens in the cache before this one, on the device (a static full-attention layer has the counter)
        length = self.cache.layers[0].cumulative_length  # type: ignore[union-attr]
        position_ids = (length - self.n_pad + self.rows).clamp(min=0)  # [B, q]
        mask = self.real[:, None, :] & (self.slots[None, :] <= length + self.rows[:, None])  # [B, q, Lc]
        # the recorder reads the logits of every row that predicts a token of the step
        keep = self.q if self.recorder is not None and self.recorder.logits else 1
        with torch.no_grad():
            out = self.model(
                input_ids=self.ids, attention_mask=mask[:, None], position_ids=position_ids,
                past_key_values=self.cache, use_cache=True, logits_to_keep=keep,
            )  # fmt: skip
        return out.logits[:, -1]

    def __call__(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Runs one step on ``token_ids`` ``[B, q]``; returns the ``[B, V]`` next-token logits (a copy).

        Raises:
            ValueError: the cache is full, or (after the capture) the recorder's answer buffers are
                (create the recorder with ``capacity=`` the longest answer).
        """
        rec = self.recorder
        path = None if rec is None else rec.padded
        if self.graphs and rec is not None and rec.seen + self.q - rec.prompt_len > rec.capacity:
            raise ValueError(
                f"the recorder holds {rec.capacity} answer tokens; give it a larger capacity= for graphs"
            )
        if self.tokens + self.q > self.max_len:
            raise ValueError(f"the static cache is full ({self.max_len} tokens)")
        if tuple(token_ids.shape) != tuple(self.ids.shape):
            raise ValueError(
                f"token_ids must have shape {tuple(self.ids.shape)}, got {tuple(token_ids.shape)}"
            )
        self.tokens += self.q
        self.ids.copy_(token_ids, non_blocking=True)
        if not self.capture or self.warm.get(path, 0) < WARMUP_STEPS:
            self.warm[path] = self.warm.get(path, 0) + 1
            self.steps += 1
            return self._step().clone()
        if path not in self.graphs:
            graph = torch.cuda.CUDAGraph()
            seen = None if rec is None else rec.seen
            with torch.cuda.graph(graph):
                logits = self._step()
            self.graphs[path] = (graph, logits)
            if (
                rec is not None and seen is not None
            ):  # the capture ran the hooks' host code: undo its count, the replay counts
                rec.seen = seen
        graph, logits = self.graphs[path]
        graph.replay()
        if rec is not None:
            rec.seen += self.q
        self.steps += 1
        return logits.clone()


__all__ = ["GraphedDecodeStep"]
