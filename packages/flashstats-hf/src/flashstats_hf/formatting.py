"""Teacher-forced inputs from (context, question, answer) with the model's own chat template."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

DEFAULT_USER_TEMPLATE = "{context}\n\n{question}"
"""How context and question form the user turn (an empty question leaves the context alone)."""


def format_example(
    tokenizer: PreTrainedTokenizerBase,
    context: str,
    question: str,
    answer: str,
    *,
    user_template: str = DEFAULT_USER_TEMPLATE,
) -> tuple[list[int], int]:
    """Token ids of a chat where the user gives context and question and the assistant gives the answer.

    The chat template renders the user turn with the generation prompt (thinking off, via
    ``enable_thinking=False``, where the template has the switch) followed by the answer; the
    sequence ends with the answer's last token (no end-of-turn token), so the answer is the last
    ``len(ids) - response_start`` tokens, as [`flashstats_hf.record_forward`][] expects.

    Args:
        tokenizer: a Transformers tokenizer with a chat template.
        context: the supplied context (document, passages).
        question: the question or instruction; may be empty.
        answer: the answer to score; must not be empty.
        user_template: format string with ``{context}`` and ``{question}`` for the user turn.

    Returns:
        tuple[list[int], int]: ``(input_ids, response_start)``, the token ids and the index of the first
        answer token.

    Raises:
        ValueError: if the answer is empty, or the template does not render the answer after its own
            generation prompt (``response_start`` could not be located exactly).
    """
    for name, text in (("context", context), ("question", question), ("answer", answer)):
        if not isinstance(text, str):
            raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    if not answer.strip():
        raise ValueError("answer must not be empty")
    messages, prefix = _user_turn(tokenizer, context, question, user_template)
    full = _render(
        tokenizer, [*messages, {"role": "assistant", "content": answer}], add_generation_prompt=False
    )
    if not full.startswith(prefix):
        raise ValueError("the chat template does not render the assistant turn after its generation prompt")
    rest = full[len(prefix) :]
    body = answer if answer in rest else answer.strip()
    k = rest.find(body)
    if k < 0:
        raise ValueError("the chat template changes the answer text; cannot locate it in the rendered chat")
    prompt_text = full[: len(prefix) + k]
    prompt_ids = _encode(tokenizer, prompt_text)
    ids = _encode(tokenizer, prompt_text + body)
    if ids[: len(prompt_ids)] != prompt_ids:  # a token merged across the boundary: keep them apart
        ids = prompt_ids + _encode(tokenizer, body)
    start = len(prompt_ids)
    decoded = str(tokenizer.decode(ids[start:], clean_up_tokenization_spaces=False))
    if start == len(ids) or decoded.strip() != body.strip():
        raise ValueError(f"answer tokens decode to {decoded!r}, expected {body!r}")
    return ids, start


def _render(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]], add_generation_prompt: bool
) -> str:
    """The chat rendered as text (``enable_thinking=False`` for templates that read it)."""
    text = tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=False, enable_thinking=False
    )
    if not isinstance(text, str):
        raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, expected str")
    return text


def _user_turn(tokenizer, context: str, question: str, user_template: str) -> tuple[list[dict], str]:
    """The chat's user message and its rendering up to the assistant's generation prompt."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(f"tokenizer {type(tokenizer).__name__} has no chat template")
    user = user_template.format(context=context, question=question) if question else context
    messages = [{"role": "user", "content": user}]
    return messages, _render(tokenizer, messages, add_generation_prompt=True)


def format_prompt(
    tokenizer: PreTrainedTokenizerBase,
    context: str,
    question: str,
    *,
    user_template: str = DEFAULT_USER_TEMPLATE,
) -> list[int]:
    """Token ids of the chat up to the assistant's generation prompt (what the proxy answers from).

    The prompt of [`format_example`][flashstats_hf.format_example] for the same context and question,
    when its template renders the answer right after the generation prompt (the usual case).

    Args:
        tokenizer: a Transformers tokenizer with a chat template.
        context: the supplied context.
        question: the question or instruction; may be empty.
        user_template: format string with ``{context}`` and ``{question}`` for the user turn.

    Returns:
        The prompt's token ids.
    """
    for name, text in (("context", context), ("question", question)):
        if not isinstance(text, str):
            raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    return _encode(tokenizer, _user_turn(tokenizer, context, question, user_template)[1])


def _encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


@dataclass
class Batch:
    """Left-padded teacher-forced inputs, ready for [`flashstats_hf.record_forward`][]."""

    input_ids: torch.Tensor
    """``[B, L] int64``: token ids, padding on the left."""
    attention_mask: torch.Tensor
    """``[B, L] int64``: 1 on real tokens, 0 on padding."""
    response_start: torch.Tensor
    """``[B] int64``: padded index of each example's first answer token."""

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on ``device``."""
        return Batch(*(t.to(device) for t in (self.input_ids, self.attention_mask, self.response_start)))


def collate(examples: Sequence[tuple[Sequence[int], int]], pad_token_id: int = 0) -> Batch:
    """Left-pad ``(input_ids, response_start)`` pairs into a batch.

    The pairs are what [`format_example`][flashstats_hf.format_example] returns.

    Args:
        examples: pairs of token ids and the index of the first answer token.
        pad_token_id: id written into padded positions (masked, so any valid id works).

    Returns:
        Batch with every example right-aligned, so answers end at the last position.
    """
    if not examples:
        raise ValueError("collate needs at least one example")
    length = max(len(ids) for ids, _ in examples)
    input_ids = torch.full((len(examples), length), pad_token_id, dtype=torch.int64)
    mask = torch.zeros(len(examples), length, dtype=torch.int64)
    starts = []
    for b, (ids, start) in enumerate(examples):
        if not 0 < start < len(ids):
            raise ValueError(f"example {b}: response_start must lie in [1, {len(ids) - 1}], got {start}")
        pad = length - len(ids)
        input_ids[b, pad:] = torch.as_tensor(list(ids), dtype=torch.int64)
        mask[b, pad:] = 1
        starts.append(pad + start)
    return Batch(
        input_ids=input_ids, attention_mask=mask, response_start=torch.tensor(starts, dtype=torch.int64)
    )
