"""Streaming a reader: the adapted proxy with a KV cache, the token head on each new token.

[`halluprobe.StreamingScorer`][] given a reader builds a `ReaderStreamingScorer`: the same ``follow``
and ``generate``, with the proxy's KV cache in place of the statistics recorder. Each update reads only
the new tokens; the running probability is the reader's on the answer so far, and once the answer is
complete it equals [`Reader.predict_text`][halluprobe.Reader.predict_text] up to float round-off.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from halluprobe.detectors._streaming import Follower, StreamingScorer, StreamUpdate

__all__ = ["ReaderCache", "ReaderStreamingScorer"]


class ReaderCache:
    """The adapted proxy's KV cache over one prompt and answer, with the token logits of the answer."""

    def __init__(self, model: Any, head: Any, prompt_len: int) -> None:
        from transformers import DynamicCache

        self.model, self.head, self.prompt_len = model, head, prompt_len
        self.cache = DynamicCache(config=model.config)
        self.read = 0
        self.answer_logits: list[float] = []

    def __enter__(self) -> ReaderCache:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @torch.no_grad()
    def feed(self, ids: torch.Tensor) -> torch.Tensor:
        """Read ``ids: [1, n]``; returns ``[1, V]`` next-token logits after the last of them."""
        out = self.model.get_decoder()(input_ids=ids, past_key_values=self.cache, use_cache=True)
        hidden = out.last_hidden_state  # [1, n, Dm]
        n = int(ids.shape[1])
        first = max(0, self.prompt_len - self.read)  # the first fed position that is an answer token
        if first < n:
            self.answer_logits += self.head(hidden[0, first:]).float().cpu().tolist()
        self.read += n
        return self.model.get_output_embeddings()(hidden[:, -1])


class ReaderStreamingScorer(StreamingScorer):
    """[`StreamingScorer`][halluprobe.StreamingScorer] of a [`Reader`][halluprobe.Reader]."""

    def _recorder(self, prompt_len: int) -> ReaderCache:
        ext, head = self.detector._model_head(self.device)
        return ReaderCache(ext.model, head, prompt_len)

    def _bare(self, question: str) -> None:
        return None

    def _update(self, rec, ids, new, done=False, *, prompt, answer=None, bare=None) -> StreamUpdate:
        from halluprobe._numeric import sigmoid

        tok = self.detector.extractor(self.device).tokenizer
        fresh = ids[len(ids) - new :]
        if answer is None:
            answer = tok.decode(ids, clean_up_tokenization_spaces=False)
        z = np.asarray(rec.answer_logits, dtype=np.float64)
        s = self.detector.scoring_
        prob = float(sigmoid(s.logit(s.raw([z], [(*prompt, answer if answer.strip() else ".")])))[0])
        tokens = [tok.decode([t], clean_up_tokenization_spaces=False) for t in fresh]
        return StreamUpdate(
            token_ids=list(fresh), tokens=tokens,
            token_scores=sigmoid(z[len(z) - new :]), probability=prob, label=int(prob >= s.threshold),
            answer_tokens=len(ids), done=done,
        )  # fmt: skip

    def follow(self, context: str, question: str = "") -> Follower:
        """A follower of another model's answer, chunk by chunk (`halluprobe.detectors.Follower`)."""
        return _ReaderFollower(self, context, question)


class _ReaderFollower(Follower):
    def prediction(self):
        """The reader's [`Prediction`][halluprobe.Prediction] of the answer read so far."""
        answer = self.tokenizer.decode(self.fed, clean_up_tokenization_spaces=False)
        return self.scorer.detector.predict_text(
            self.context, self.question, answer, device=self.scorer.device
        )
