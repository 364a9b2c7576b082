"""Scoring while generating: a saved detector scores answer tokens as they arrive.

Two entry points, both on the detector's proxy with a KV cache
([`flashstats_hf.CachedRecorder`][]), so no token is read twice:

- [`StreamingScorer.generate`][halluprobe.StreamingScorer.generate]: the proxy writes the answer
  itself (self-check), one token per step, greedy or sampled.
- [`StreamingScorer.follow`][halluprobe.StreamingScorer.follow]: the proxy follows another model's
  answer as its text arrives, chunk by chunk ([`Follower.add`][halluprobe.detectors._streaming.Follower.add]).

Each update carries the scores of the tokens that just arrived and the running answer-level
probability, which is the detector's [`Detector.predict`][halluprobe.Detector.predict] on the answer
so far; once the answer is complete it equals the teacher-forced prediction. Higher means more likely
hallucinated. The running probability costs one pooling of the per-token statistics per update.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from halluprobe.detectors._detector import Detector, Prediction


@dataclass
class StreamUpdate:
    """What a streaming scorer reports after new answer tokens were read."""

    token_ids: list[int]
    """The new answer tokens' ids."""
    tokens: list[str]
    """The new answer tokens, as text."""
    token_scores: np.ndarray
    """``[n] float64``: each new token's probability of being hallucinated (the detector's per-token
    contribution given the answer so far; higher = more likely hallucinated)."""
    probability: float
    """Probability that the answer so far is hallucinated (the detector on the answer so far)."""
    label: int
    """1 when ``probability >= threshold``."""
    answer_tokens: int
    """Answer tokens read so far."""
    done: bool = False
    """True on the last update of an answer."""


NO_WORDS = "."
"""What the text features (block G) read while the answer so far is only whitespace: a text without words
(the grounding features refuse blank text, and any text without words has the same features)."""


class StreamingScorer:
    """Streams the scores of a saved detector over answers that arrive token by token.

    Args:
        detector: A [`Detector`][halluprobe.Detector] (its proxy is loaded on first use).
        device: Torch device of the proxy (None: the detector's default).
    """

    def __new__(cls, detector: Detector, *, device: str | None = None) -> StreamingScorer:
        # a fine-tuned reader streams through its own KV cache (`halluprobe.reader`)
        kind = getattr(detector, "_streaming_type", None)
        if cls is StreamingScorer and kind is not None:
            cls = kind()
        return super().__new__(cls)

    def __init__(self, detector: Detector, *, device: str | None = None) -> None:
        self.detector = detector
        self.device = device

    def _recorder(self, prompt_len: int):
        from flashstats_hf import DEFAULT_REQUEST, CachedRecorder

        ext = self.detector.extractor(self.device)
        reads = getattr(ext, "reads", None)
        if reads is None:
            return CachedRecorder(
                ext.model, prompt_len=prompt_len, request=DEFAULT_REQUEST, layers=ext.layers, logits=True,
                hidden_layers=ext.hidden_layers,
            )  # fmt: skip
        request = dataclasses.replace(DEFAULT_REQUEST, lookups=reads.lookups, columns=reads.columns)
        return CachedRecorder(
            ext.model, prompt_len=prompt_len, request=request, layers=reads.layers, logits=reads.logits,
            hidden_layers=reads.hidden_layers,
        )  # fmt: skip

    def _stats(self, rec):
        """The recorder's statistics, widened to a full extraction where only the detector's reads ran."""
        ext = self.detector.extractor(self.device)
        fs = rec.stats()
        if getattr(ext, "reads", None) is None:
            return fs
        from halluprobe.features._reads import complete

        cfg = ext.model.config
        scored = tuple(range(int(cfg.num_hidden_layers))) if ext.layers is None else tuple(ext.layers)
        heads, width = int(cfg.num_attention_heads), int(cfg.hidden_size)
        return complete(fs, scored, tuple(ext.hidden_layers or ()), heads, width)

    def _bare(self, question: str):
        """The forward without the context, kept as a KV cache (None when the detector has no block C)."""
        if not self.detector.uses_contrast:
            return None
        from halluprobe.features._contrast import BareFollower, bare_prompt

        ext = self.detector.extractor(self.device)
        return BareFollower(ext.model, bare_prompt(ext.tokenizer, question))

    def _update(
        self,
        rec,
        ids: list[int],
        new: int,
        done: bool = False,
        *,
        prompt: tuple[str, str],
        answer: str | None = None,
        bare=None,
    ) -> StreamUpdate:
        """The update after ``new`` tokens.

        ``answer``: the text so far (default: ``ids`` decoded); ``bare``: the `BareFollower` that has read
        the same tokens (block C).
        """
        tok = self.detector.extractor(self.device).tokenizer
        fresh = ids[len(ids) - new :]
        if answer is None:
            answer = tok.decode(ids, clean_up_tokenization_spaces=False)
        if not answer.strip():  # whitespace tokens so far: the text features of an answer without words
            answer = NO_WORDS
        pred = self.detector.score_stats(
            self._stats(rec), [tok.decode([t], clean_up_tokenization_spaces=False) for t in fresh],
            text=(*prompt, answer), answer_ids=ids, bare=None if bare is None else bare.logprobs,
        )  # fmt: skip
        return StreamUpdate(
            token_ids=fresh, tokens=pred.tokens, token_scores=pred.token_scores[len(ids) - new :],
            probability=pred.probability, label=pred.label, answer_tokens=len(ids), done=done,
        )  # fmt: skip

    def follow(self, context: str, question: str = "") -> Follower:
        """A [`Follower`][halluprobe.detectors.Follower] that reads another model's answer as it arrives.

        The prompt (context and question in the proxy's chat template) is read at once.
        """
        return Follower(self, context, question)

    @torch.no_grad()
    def generate(
        self,
        context: str,
        question: str = "",
        *,
        max_new_tokens: int = 128,
        do_sample: bool = False,
        temperature: float = 1.0,
        seed: int = 0,
    ) -> Iterator[StreamUpdate]:
        """The proxy answers itself; yields one update per generated token (the last one ``done``).

        Generation stops at an end token (not part of the answer: the tokenizer's end of sequence or
        one of the model's generation-config ``eos_token_id``, such as a chat model's end of turn) or
        after ``max_new_tokens``. Sampling draws from ``softmax(logits / temperature)`` with a seeded
        generator.

        Yields:
            [`StreamUpdate`][halluprobe.StreamUpdate] after each answer token has been read.
        """
        from flashstats_hf import format_prompt

        if max_new_tokens < 1 or not math.isfinite(temperature) or temperature <= 0:
            raise ValueError(
                f"need max_new_tokens >= 1 and temperature > 0, got {max_new_tokens}, {temperature}"
            )
        ext = self.detector.extractor(self.device)
        tok, dev = ext.tokenizer, next(ext.model.parameters()).device
        prompt = format_prompt(tok, context, question)
        ext.check_length(len(prompt) + 1, "the context")  # room for one answer token at least
        rec, bare = self._recorder(len(prompt)), self._bare(question)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        stop = _stop_ids(ext.model, tok)
        ids: list[int] = []
        with rec:
            logits = rec.feed(torch.tensor([prompt], device=dev))
        for step in range(max_new_tokens):
            scores = logits[0].float().cpu()
            if do_sample:
                nxt = int(torch.multinomial(torch.softmax(scores / temperature, -1), 1, generator=gen))
            else:
                nxt = int(scores.argmax())
            if nxt in stop:  # the answer ended before max_new_tokens: a closing update
                if ids:
                    yield self._update(rec, ids, 0, done=True, prompt=(context, question), bare=bare)
                return
            ext.check_length(len(prompt) + len(ids) + 1, "the context and generated answer")
            with rec:
                logits = rec.feed(torch.tensor([[nxt]], device=dev))
            ids.append(nxt)
            if bare is not None:
                bare.feed([nxt])
            yield self._update(
                rec, ids, 1, done=step == max_new_tokens - 1, prompt=(context, question), bare=bare
            )


def _stop_ids(model: torch.nn.Module, tokenizer: Any) -> set[int]:
    """Token ids that end a generated answer.

    The tokenizer's end of sequence and the model's generation-config ``eos_token_id`` (an int or a
    list): SmolLM2's end of turn ``<|im_end|>`` is only in the latter (its GGUF tokenizer names
    ``<|im_start|>``).
    """
    ids: set[int] = set()
    config = getattr(model, "generation_config", None)
    for value in (getattr(tokenizer, "eos_token_id", None), getattr(config, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return ids


class Follower:
    """Follows an answer that arrives as text chunks (made by `StreamingScorer.follow`).

    The answer so far is tokenised as [`flashstats_hf.format_example`][] tokenises a whole answer;
    its last token is held back until more text (or [`finish`][halluprobe.detectors.Follower.finish])
    shows where it ends, so the tokens read are exactly those of the finished answer.
    """

    def __init__(self, scorer: StreamingScorer, context: str, question: str) -> None:
        from flashstats_hf import format_prompt

        self.scorer, self.context, self.question = scorer, context, question
        ext = scorer.detector.extractor(scorer.device)
        self.tokenizer = ext.tokenizer
        self.device = next(ext.model.parameters()).device
        self.prompt = format_prompt(self.tokenizer, context, question)
        self.check_length = ext.check_length
        self.check_length(len(self.prompt) + 1, "the context")  # room for one answer token at least
        self.rec = scorer._recorder(len(self.prompt))
        self.bare = scorer._bare(question)  # block C: the forward without the context, cached too
        self.text = ""
        self.fed: list[int] = []
        with self.rec:
            self.rec.feed(torch.tensor([self.prompt], device=self.device))

    def _answer_ids(self) -> list[int]:
        from flashstats_hf import format_example

        if not self.text.strip():
            return []
        ids, start = format_example(self.tokenizer, self.context, self.question, self.text)
        if ids[:start] != self.prompt:
            raise ValueError(
                "the chat template renders this answer after a different prompt; cannot stream it"
            )
        return ids[start:]

    def _read(self, ids: list[int], done: bool) -> StreamUpdate | None:
        if ids[: len(self.fed)] != self.fed:
            raise ValueError(
                "the new text re-tokenises tokens already read (a token merged across a chunk boundary "
                "in a way holding back one token does not cover); feed larger chunks"
            )
        new = ids[len(self.fed) :]
        self.check_length(len(self.prompt) + len(ids), "the context and answer")
        if new:
            with self.rec:
                self.rec.feed(torch.tensor([new], device=self.device))
            if self.bare is not None:
                self.bare.feed(new)
            self.fed += new
        if not self.fed:
            return None
        return self.scorer._update(
            self.rec, self.fed, len(new), done=done, prompt=(self.context, self.question),
            answer=self.text if done else None, bare=self.bare,
        )  # fmt: skip

    @torch.no_grad()
    def add(self, text: str) -> StreamUpdate | None:
        """Reads a chunk of answer text; returns the update of the tokens it completed (None if none)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        self.text += text
        ids = self._answer_ids()
        if len(ids) - 1 <= len(self.fed):
            return None
        return self._read(ids[:-1], done=False)

    @torch.no_grad()
    def finish(self) -> StreamUpdate:
        """Reads the held-back last token; the update's probability is the teacher-forced prediction."""
        ids = self._answer_ids()
        if not ids:
            raise ValueError("the answer is empty: nothing to score")
        update = self._read(ids, done=True)
        assert update is not None  # ids is not empty, so tokens were read
        return update

    def prediction(self) -> Prediction:
        """The [`Prediction`][halluprobe.Prediction] of the answer read so far (scores of all its tokens)."""
        tokens = [self.tokenizer.decode([t], clean_up_tokenization_spaces=False) for t in self.fed]
        answer = self.tokenizer.decode(self.fed, clean_up_tokenization_spaces=False)
        return self.scorer.detector.score_stats(
            self.scorer._stats(self.rec),
            tokens,
            text=(self.context, self.question, answer),
            answer_ids=self.fed,
            bare=None if self.bare is None else self.bare.logprobs,
        )

    @property
    def answer_ids(self) -> list[int]:
        """Answer token ids read so far."""
        return list(self.fed)


def stream_text_chunks(text: str, words: int) -> Iterator[str]:
    """``text`` in chunks of ``words`` whitespace-separated words (the spaces kept): a simulated stream."""
    import re

    parts = re.findall(r"\s*\S+", text) + ([text[len(text.rstrip()) :]] if text != text.rstrip() else [])
    for i in range(0, len(parts), words):
        yield "".join(parts[i : i + words])


__all__ = ["Follower", "StreamUpdate", "StreamingScorer", "stream_text_chunks"]
