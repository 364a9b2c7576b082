"""An LLM judge: one forward per example, score = P(True) normalised over the True/False tokens."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from halujudge.cache import ScoreCache, text_hash
from halujudge.loading import load_pretrained, resolve_source
from halujudge.prompt import PromptTemplate, load_template, render_messages

__all__ = ["LLMJudge", "VerdictTokens", "apply_chat", "verdict_token_ids"]


@dataclass(frozen=True)
class VerdictTokens:
    """The token ids a judge's first reply token would have for each verdict."""

    true_id: int
    """Id of the first token of ``True`` (hallucinated) as the assistant's first token."""
    false_id: int
    """Id of the first token of ``False`` (supported) as the assistant's first token."""
    true_token: str
    """The vocabulary string of ``true_id`` (e.g. ``"True"`` or ``"ĠTrue"``)."""
    false_token: str
    """The vocabulary string of ``false_id``."""


def apply_chat(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """Render messages with the tokenizer's chat template, ending with the assistant's turn opener.

    Thinking is switched off (``enable_thinking=False``, ignored by templates that do not know it). A chat
    template that rejects the system role gets the system text prepended to the user turn. A tokenizer
    without a chat template gets the turns joined by blank lines.
    """
    if not getattr(tokenizer, "chat_template", None):
        return "\n\n".join(m["content"] for m in messages) + "\n\n"
    try:
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
    except Exception:  # noqa: BLE001 - templates raise arbitrary errors for an unsupported system role
        if messages[0]["role"] != "system":
            raise
        merged = [{"role": "user", "content": messages[0]["content"] + "\n\n" + messages[1]["content"]}]
        return tokenizer.apply_chat_template(
            merged, tokenize=False, add_generation_prompt=True, enable_thinking=False
        )


def _first_reply_token(tokenizer: Any, prompt: str, word: str) -> int:
    before = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    after = tokenizer(prompt + word, add_special_tokens=False)["input_ids"]
    common = 0
    while common < min(len(before), len(after)) and before[common] == after[common]:
        common += 1
    if common == len(before) and len(after) > common:
        return int(after[common])
    # The word merged with the prompt's last token (a prompt ending in a space): fall back to the bare word.
    return int(tokenizer(word, add_special_tokens=False)["input_ids"][0])


def verdict_token_ids(tokenizer: Any, prompt: str) -> VerdictTokens:
    """Find the ids of ``True`` and ``False`` as the first token the assistant would write after ``prompt``.

    The word is appended to the rendered prompt and the text is tokenized again; the first token after the
    prompt's own tokens is the one the model would have to produce (``"True"`` after a newline for most chat
    templates, ``"ĠTrue"`` after a template that ends without one).

    Args:
        tokenizer: a Transformers tokenizer.
        prompt: a prompt rendered by [`apply_chat`][halujudge.apply_chat] (any example: the ending is what
            matters).

    Raises:
        ValueError: if both words start with the same token.
    """
    true_id = _first_reply_token(tokenizer, prompt, "True")
    false_id = _first_reply_token(tokenizer, prompt, "False")
    if true_id == false_id:
        raise ValueError(f"'True' and 'False' start with the same token id {true_id} for this tokenizer")
    true_tok, false_tok = tokenizer.convert_ids_to_tokens([true_id, false_id])
    return VerdictTokens(true_id, false_id, str(true_tok), str(false_tok))


def _accepts(fn: Any, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class LLMJudge:
    """A causal LM prompted to answer True (hallucinated) or False (supported).

    The score of an example is ``P(True) / (P(True) + P(False))`` from the next-token logits after the
    rendered prompt: higher means more likely hallucinated. No tokens are sampled.

    Args:
        model: a Transformers causal LM (``AutoModelForCausalLM``), already on its device.
        tokenizer: its tokenizer (with a chat template for instruction-tuned models).
        template: a [`PromptTemplate`][halujudge.PromptTemplate] or the name of a shipped one.
        model_id: the name recorded in the score cache.
        batch_size: examples per forward.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        template: PromptTemplate | str = "strict",
        model_id: str = "model",
        batch_size: int = 4,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.template = load_template(template) if isinstance(template, str) else template
        self.model_id = model_id
        self.batch_size = batch_size
        probe = apply_chat(tokenizer, render_messages(self.template, "c", "q", "a"))
        self.tokens = verdict_token_ids(tokenizer, probe)

    @classmethod
    def from_pretrained(
        cls, model: str | Path, template: PromptTemplate | str = "strict", device: str = "cpu", **kwargs: Any
    ) -> LLMJudge:
        """Load a judge from a hub id, a local snapshot, a ``.gguf`` file, or the alias ``smollm2``.

        Raises:
            WeightsNotFoundError: if the weights are neither local nor downloadable; says how to provide them.
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        source = resolve_source(model)
        tokenizer = load_pretrained(AutoTokenizer, source, "LLM judge tokenizer")
        lm = load_pretrained(AutoModelForCausalLM, source, "LLM judge").to(device).eval()
        return cls(lm, tokenizer, template=template, model_id=source.name, **kwargs)

    def with_template(self, template: PromptTemplate | str) -> LLMJudge:
        """The same model and tokenizer with another template."""
        return LLMJudge(self.model, self.tokenizer, template, self.model_id, self.batch_size)

    def prompt(self, context: str, question: str, answer: str) -> str:
        """The full text the model reads for one example (chat template applied)."""
        return apply_chat(self.tokenizer, render_messages(self.template, context, question, answer))

    def _forward(self, batch: list[list[int]]) -> np.ndarray:
        import torch

        pad = self.tokenizer.pad_token_id
        pad = pad if pad is not None else (self.tokenizer.eos_token_id or 0)
        width = max(len(ids) for ids in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, seq in enumerate(batch):  # left padding: the last position is every row's last token
            ids[row, width - len(seq) :] = torch.tensor(seq)
            mask[row, width - len(seq) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        device = next(self.model.parameters()).device
        kwargs: dict[str, Any] = {"attention_mask": mask.to(device), "position_ids": positions.to(device)}
        if _accepts(self.model.forward, "logits_to_keep"):
            kwargs["logits_to_keep"] = 1
        with torch.no_grad():
            logits = self.model(input_ids=ids.to(device), **kwargs).logits[:, -1, :]
        pair = logits[:, [self.tokens.true_id, self.tokens.false_id]].double()
        return torch.softmax(pair, dim=-1)[:, 0].cpu().numpy()

    def score(
        self, examples: Sequence[Any], cache: ScoreCache | None = None, progress: bool = True
    ) -> np.ndarray:
        """Score examples; cached scores are reused and new ones appended to the cache after every batch.

        Args:
            examples: objects with ``id``, ``context``, ``question`` and ``answer`` (e.g. ``Example``).
            cache: an optional score cache, keyed by (model id, template name, example id, prompt hash).
            progress: show a progress bar.

        Returns:
            np.ndarray: ``[N] float64``, P(True) normalised over True/False; higher = more likely
            hallucinated.
        """
        prompts = [self.prompt(e.context, e.question, e.answer) for e in examples]
        digests = [text_hash(p) for p in prompts]
        scores = np.full(len(prompts), np.nan)
        todo = []
        for i, (example, digest) in enumerate(zip(examples, digests, strict=True)):
            hit = cache.get(self.model_id, self.template.name, str(example.id), digest) if cache else None
            if hit is None:
                todo.append(i)
            else:
                scores[i] = hit
        encoded = {i: self.tokenizer(prompts[i], add_special_tokens=False)["input_ids"] for i in todo}
        todo.sort(key=lambda i: -len(encoded[i]))  # similar lengths share a batch: less padding
        bar = tqdm(total=len(todo), desc=f"judge {self.template.name}", disable=not progress, leave=False)
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            probs = self._forward([encoded[i] for i in chunk])
            scores[chunk] = probs
            if cache is not None:
                cache.put_many(
                    [
                        (self.model_id, self.template.name, str(examples[i].id), digests[i], float(p))
                        for i, p in zip(chunk, probs, strict=True)
                    ]
                )
            bar.update(len(chunk))
        bar.close()
        return scores
