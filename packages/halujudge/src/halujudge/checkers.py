"""Grounding checkers: MiniCheck (document chunks, whole claim) and HHEM-2.1-Open (premise, hypothesis).

Both estimate the probability that a document supports a text; the hallucination score is one minus it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from tqdm.auto import tqdm

from halujudge.cache import ScoreCache, text_hash
from halujudge.judge import _first_reply_token, apply_chat
from halujudge.loading import WeightsNotFoundError, load_pretrained, resolve_source
from halujudge.text import chunk_document, split_sentences

if TYPE_CHECKING:
    import torch

__all__ = ["HHEM", "MiniCheck"]

Style = Literal["seq2seq", "causal", "classifier"]
Claims = Literal["whole", "sentences"]

# Bespoke-MiniCheck-7B was trained with this instruction in the system turn and "Document: ...\nClaim: ..."
# in the user turn; the model must see the same input to give calibrated answers, so it is kept verbatim.
MINICHECK_SYSTEM = (
    "Determine whether the provided claim is consistent with the corresponding document. Consistency in "
    "this context implies that all information presented in the claim is substantiated by the document. "
    "If not, it should be considered inconsistent. Please assess the claim's consistency with the document "
    'by responding with either "Yes" or "No".'
)
# HHEM-2.1-Open's input format (its config's ``prompt``); the leading "<pad>" is the tokenizer's pad token.
HHEM_PROMPT = (
    "<pad> Determine if the hypothesis is true given the premise?"
    "\n\nPremise: {premise}"
    "\n\nHypothesis: {hypothesis}"
)


def _premise(example: Any, include_question: bool) -> str:
    if include_question and example.question.strip():
        return f"Question: {example.question}\n\n{example.context}"
    return example.context


class _PairScorer:
    """Shared batching, caching and aggregation of (document chunk, claim) support probabilities."""

    name = "checker"
    model_id = "checker"
    tokenizer: Any
    batch_size = 8
    include_question = True

    def _count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def support(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Support probabilities of (document, claim) pairs, in batches, without chunking.

        Returns:
            support: [P] float64. Probability that the document supports the claim.
        """
        out = np.empty(len(pairs))
        for start in range(0, len(pairs), self.batch_size):
            out[start : start + self.batch_size] = self._support_batch(
                list(pairs[start : start + self.batch_size])
            )
        return out

    def _support_batch(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        raise NotImplementedError

    def _plan(self, example: Any) -> list[list[tuple[str, str]]]:
        """For each claim of the example, the (chunk, claim) pairs to score."""
        raise NotImplementedError

    def _settings(self) -> str:
        """Everything besides the text that changes a score; part of the cache key's hash."""
        raise NotImplementedError

    def score(
        self, examples: Sequence[Any], cache: ScoreCache | None = None, progress: bool = True
    ) -> np.ndarray:
        """Hallucination scores: one minus the lowest, over claims, of the highest support over chunks.

        (With one claim, the whole answer, this is one minus its highest support over chunks.)

        Args:
            examples: objects with ``id``, ``context``, ``question`` and ``answer`` (e.g. ``Example``).
            cache: an optional score cache keyed by (model id, checker name, example id, text hash).
            progress: show a progress bar.

        Returns:
            ``[N] float64`` in [0, 1]; higher = more likely hallucinated.
        """
        scores = np.full(len(examples), np.nan)
        bar = tqdm(total=len(examples), desc=self.name, disable=not progress, leave=False)
        for i, example in enumerate(examples):
            digest = text_hash(self._settings(), _premise(example, self.include_question), example.answer)
            hit = cache.get(self.model_id, self.name, str(example.id), digest) if cache else None
            if hit is None:
                plan = self._plan(example)
                flat = self.support([pair for claim in plan for pair in claim])
                best, at = [], 0
                for claim in plan:
                    best.append(flat[at : at + len(claim)].max())
                    at += len(claim)
                hit = float(1.0 - min(best))
                if cache is not None:
                    cache.put_many([(self.model_id, self.name, str(example.id), digest, hit)])
            scores[i] = hit
            bar.update(1)
        bar.close()
        return scores


class MiniCheck(_PairScorer):
    """MiniCheck: the support of the answer by the document, the highest over document chunks.

    The document (the question, when present and ``include_question``, then the context) is cut into chunks
    of at most ``chunk_tokens`` tokens. By default (``claims="whole"``) the whole answer is the claim, as in
    MiniCheck's own scorer and the paper (Appendix L.5): each (chunk, answer) pair gets a support
    probability, the answer keeps its highest support over chunks, and the score is one minus that (higher =
    more likely hallucinated). With ``claims="sentences"`` the answer is first split into sentences
    ([`split_sentences`][halujudge.split_sentences]), each sentence keeps its highest support over chunks and
    the answer the lowest over sentences: a stricter variant (one unsupported sentence is enough), not the
    published one.

    Input conventions by ``style``:

    * ``seq2seq`` (MiniCheck-Flan-T5-Large): encoder reads ``"predict: " + chunk + eos + claim``; the decoder
      starts from its start token and the support is the softmax of the first step's logits over the first
      tokens of ``"0"`` (unsupported) and ``"1"`` (supported).
    * ``causal`` (Bespoke-MiniCheck-7B): the chat template renders MiniCheck's system instruction and
      ``"Document: {chunk}"``, a line break and ``"Claim: {claim}"``; the support is the next-token
      probability of ``Yes``/``yes``.
    * ``classifier`` (MiniCheck-RoBERTa/DeBERTa): one text ``chunk + eos + claim``; support = softmax[:, 1].

    Args:
        model: a Transformers model of the style's shape, already on its device.
        tokenizer: its tokenizer.
        style: ``seq2seq``, ``causal`` or ``classifier``.
        chunk_tokens: token budget of a document chunk; default 500 (seq2seq, classifier) or 32,468 (causal).
        max_length: truncation length of one input; default 2048 (seq2seq, classifier), none (causal).
        batch_size: pairs per forward.
        model_id: name recorded in caches and reports.
        include_question: prepend ``"Question: ..."`` to the document.
        claims: ``"whole"`` (default: the answer is one claim) or ``"sentences"`` (minimum over sentences).
    """

    name = "minicheck"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        style: Style = "seq2seq",
        chunk_tokens: int | None = None,
        max_length: int | None = None,
        batch_size: int = 8,
        model_id: str = "minicheck",
        include_question: bool = True,
        claims: Claims = "whole",
    ) -> None:
        if claims not in ("whole", "sentences"):
            raise ValueError(f"claims must be 'whole' or 'sentences', got {claims!r}")
        if style not in ("seq2seq", "causal", "classifier"):
            raise ValueError(f"style must be 'seq2seq', 'causal' or 'classifier', got {style!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.model, self.tokenizer, self.style = model, tokenizer, style
        self.chunk_tokens = chunk_tokens or (32_768 - 300 if style == "causal" else 500)
        self.max_length = max_length if max_length is not None else (None if style == "causal" else 2048)
        self.batch_size, self.model_id, self.include_question = batch_size, model_id, include_question
        self.claims = claims
        if style == "seq2seq":
            self._label_ids = [tokenizer("0", add_special_tokens=False)["input_ids"][0],
                               tokenizer("1", add_special_tokens=False)["input_ids"][0]]  # fmt: skip
            if self._label_ids[0] == self._label_ids[1]:
                raise ValueError("the tokenizer gives '0' and '1' the same first token")
        if style == "causal":
            prompt = apply_chat(tokenizer, self._messages("d", "c"))
            self._yes_ids = sorted({_first_reply_token(tokenizer, prompt, w) for w in ("Yes", "yes")})

    @classmethod
    def from_pretrained(
        cls, model: str | Path, style: Style | None = None, device: str = "cpu", **kwargs: Any
    ):
        """Load a MiniCheck model from a hub id or a local snapshot; the style is read from its config.

        Raises:
            WeightsNotFoundError: if the weights are neither local nor downloadable; says how to provide them.
        """
        from transformers import (
            AutoConfig,
            AutoModelForCausalLM,
            AutoModelForSeq2SeqLM,
            AutoModelForSequenceClassification as AutoClassifier,
            AutoTokenizer,
        )

        source = resolve_source(model)
        config = load_pretrained(AutoConfig, source, "MiniCheck checker config")
        if style is None:
            archs = " ".join(getattr(config, "architectures", None) or [])
            is_cls = "SequenceClassification" in archs
            style = "seq2seq" if config.is_encoder_decoder else "classifier" if is_cls else "causal"
        loader = {
            "seq2seq": AutoModelForSeq2SeqLM,
            "causal": AutoModelForCausalLM,
            "classifier": AutoClassifier,
        }
        tokenizer = load_pretrained(AutoTokenizer, source, "MiniCheck tokenizer")
        net = load_pretrained(loader[style], source, "MiniCheck checker").to(device).eval()
        return cls(net, tokenizer, style=style, model_id=source.name, **kwargs)

    def _settings(self) -> str:
        return (
            f"minicheck style={self.style} chunk={self.chunk_tokens} max_length={self.max_length} "
            f"claims={self.claims}"
        )

    @staticmethod
    def _messages(document: str, claim: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": MINICHECK_SYSTEM},
            {"role": "user", "content": f"Document: {document}\nClaim: {claim}"},
        ]

    def _plan(self, example: Any) -> list[list[tuple[str, str]]]:
        chunks = chunk_document(_premise(example, self.include_question), self.chunk_tokens, self._count)
        claims = [example.answer.strip()]
        if self.claims == "sentences":
            claims = split_sentences(example.answer) or claims
        return [[(chunk, claim) for chunk in chunks] for claim in claims]

    def _encode(self, texts: list[str], padding_side: str = "right") -> dict[str, torch.Tensor]:
        kwargs: dict[str, Any] = {"padding": True, "return_tensors": "pt", "padding_side": padding_side}
        if self.max_length is not None:
            kwargs.update(truncation=True, max_length=self.max_length)
        device = next(self.model.parameters()).device
        return {k: v.to(device) for k, v in self.tokenizer(texts, **kwargs).items()}

    def _support_batch(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        import torch

        eos = self.tokenizer.eos_token or ""
        if self.style == "seq2seq":
            enc = self._encode([f"predict: {doc}{eos}{claim}" for doc, claim in pairs])
            start = self.model.config.decoder_start_token_id
            dec = torch.full((len(pairs), 1), start, dtype=torch.long, device=enc["input_ids"].device)
            with torch.no_grad():
                logits = self.model(**enc, decoder_input_ids=dec).logits[:, 0, self._label_ids]
            return torch.softmax(logits.double(), -1)[:, 1].cpu().numpy()
        if self.style == "classifier":
            with torch.no_grad():
                logits = self.model(**self._encode([f"{doc}{eos}{claim}" for doc, claim in pairs])).logits
            return torch.softmax(logits.double(), -1)[:, 1].cpu().numpy()
        prompts = [apply_chat(self.tokenizer, self._messages(doc, claim)) for doc, claim in pairs]
        enc = self._encode(prompts, padding_side="left")
        enc.pop("token_type_ids", None)
        positions = (enc["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            logits = self.model(**enc, position_ids=positions).logits[:, -1, :]
        probs = torch.softmax(logits.double(), -1)
        return probs[:, self._yes_ids].sum(-1).cpu().numpy()


class HHEM(_PairScorer):
    """HHEM-2.1-Open: the probability that a premise supports a hypothesis, chunked above 8,192 tokens.

    The premise is the context (after ``"Question: ..."`` when present and ``include_question``), the
    hypothesis the whole answer. The input is HHEM's prompt: ``"<pad> Determine if the hypothesis is true
    given the premise?"``, then ``"Premise: ..."`` and ``"Hypothesis: ..."`` after blank lines. The model is a
    T5 encoder with a two-way token-classification head (``T5ForTokenClassification``, as HHEM's remote code
    wraps it) and the support is the softmax of the first position's logits, class 1. When the prompt exceeds
    ``max_tokens``, the premise is cut into chunks that fit and the highest support is kept.
    Score = 1 - support (higher = more likely hallucinated).

    Args:
        model: a module called as ``model(input_ids=..., attention_mask=...)`` whose output has
            ``logits: [B, T, 2]`` (``T5ForTokenClassification`` with ``num_labels=2``).
        tokenizer: the Flan-T5 tokenizer HHEM uses (``google/flan-t5-base``).
        max_tokens: the longest input scored whole (8,192).
        batch_size: pairs per forward.
        model_id: name recorded in caches and reports.
        include_question: prepend ``"Question: ..."`` to the premise.
    """

    name = "hhem"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_tokens: int = 8192,
        batch_size: int = 8,
        model_id: str = "HHEM-2.1-Open",
        include_question: bool = True,
    ) -> None:
        if not isinstance(max_tokens, int) or max_tokens < 16:
            raise ValueError(f"max_tokens must be an int of at least 16, got {max_tokens!r}")
        self.model, self.tokenizer, self.max_tokens = model, tokenizer, max_tokens
        self.batch_size, self.model_id, self.include_question = batch_size, model_id, include_question

    @classmethod
    def from_pretrained(cls, model: str | Path, foundation: str | Path, device: str = "cpu", **kwargs: Any):
        """Load HHEM-2.1-Open weights into a plain ``T5ForTokenClassification``, without remote code.

        HHEM's published checkpoint stores the weights of a ``T5ForTokenClassification`` under the prefix
        ``t5.`` and builds that module from its foundation model's config (``google/flan-t5-base``) through
        ``trust_remote_code``. Here the foundation's config and tokenizer come from ``foundation`` and the
        weights from ``model``; nothing is executed from either folder.

        Args:
            model: a local folder with HHEM's ``model.safetensors`` (download
                ``vectara/hallucination_evaluation_model``).
            foundation: a local folder (or hub id) with the Flan-T5-base config and tokenizer (download
                ``google/flan-t5-base``).
            device: where to put the model.
            **kwargs: passed to the constructor.

        Raises:
            WeightsNotFoundError: naming the missing file and the download that provides it.
        """
        import torch
        from safetensors.torch import load_file
        from transformers import AutoConfig, AutoTokenizer, T5ForTokenClassification

        weights = Path(model) / "model.safetensors"
        if not weights.is_file():
            raise WeightsNotFoundError(
                f"HHEM weights not found: {weights} does not exist. On a machine with network access run "
                "`huggingface-cli download vectara/hallucination_evaluation_model --local-dir DIR` and pass "
                "--model DIR (its model.safetensors is what is read; its remote code is not run)."
            )
        source = resolve_source(foundation)
        config = load_pretrained(AutoConfig, source, "HHEM foundation (google/flan-t5-base) config")
        config.num_labels = 2
        tokenizer = load_pretrained(AutoTokenizer, source, "HHEM foundation (google/flan-t5-base) tokenizer")
        net = T5ForTokenClassification(config)
        state = {k.removeprefix("t5."): v for k, v in load_file(str(weights)).items()}
        missing, unexpected = net.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(
                f"{weights} does not match T5ForTokenClassification({source.name}): missing {missing[:5]}, "
                f"unexpected {unexpected[:5]}"
            )
        return cls(torch.nn.Module.to(net, device).eval(), tokenizer, model_id="HHEM-2.1-Open", **kwargs)

    def _settings(self) -> str:
        return f"hhem max_tokens={self.max_tokens}"

    def _plan(self, example: Any) -> list[list[tuple[str, str]]]:
        premise, hypothesis = _premise(example, self.include_question), example.answer
        overhead = self._count(HHEM_PROMPT.format(premise="", hypothesis=hypothesis)) + 1  # + eos
        if overhead + self._count(premise) <= self.max_tokens:
            return [[(premise, hypothesis)]]
        budget = self.max_tokens - overhead
        if budget < 8:
            raise ValueError(
                f"example {example.id!r}: the hypothesis alone nearly fills max_tokens={self.max_tokens}"
            )
        return [[(chunk, hypothesis) for chunk in chunk_document(premise, budget, self._count)]]

    def _support_batch(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        import torch

        texts = [HHEM_PROMPT.format(premise=p, hypothesis=h) for p, h in pairs]
        enc = self.tokenizer(texts, padding=True, return_tensors="pt")
        device = next(self.model.parameters()).device
        with torch.no_grad():
            logits = self.model(
                input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device)
            )
        return torch.softmax(logits.logits[:, 0, :].double(), -1)[:, 1].cpu().numpy()
