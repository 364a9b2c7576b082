"""Packed recorded forwards: a left-padded batch as one sequence of documents, without padding or masks.

The real tokens of every example are laid one after another on a single token axis (``T`` tokens);
position ids restart at each document. Every layer attends within documents only: unscored layers
and the prompt rows of scored layers run the Base kernel of
[`flashstats_kernels.response_attention_varlen`][] (on CUDA) or PyTorch SDPA document by document
(CPU), and the answer rows of scored layers run the statistics kernels in one packed call. No
``[B, L, L]`` or ``[T, T]`` mask is built.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from flashstats_kernels import (
    AttentionResult,
    ColumnStats,
    LookupStats,
    RowStats,
    StatsRequest,
    response_attention_varlen,
)
from flashstats_kernels.api import resolve_backend
from transformers import masking_utils

from flashstats_hf._sdpa import base_attention, kernel_can_run, plain_attention, visibility


@contextlib.contextmanager
def unpacked_positions() -> Iterator[None]:
    """Tells Transformers' mask builder that the input needs no packed-sequence mask.

    Without an attention mask, Transformers checks the position ids for packed sequences (a host read;
    while a CUDA graph is captured it skips the read and assumes packing) and then builds a dense
    packed-sequence mask. Our forwards never need it: graph captures are one unpacked example, and
    packed recorded forwards keep documents apart in the attention itself. Inside this context the
    check answers "not packed" without looking.
    """
    fn = getattr(masking_utils, "find_packed_sequence_indices", None)
    if fn is None:  # a Transformers version without the check: nothing to do
        yield
        return
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = fn


@dataclass(frozen=True)
class Packing:
    """Where the documents and their answers lie on the packed token axis (all on the inputs' device).

    Shapes: ``B`` documents, ``T`` packed tokens, ``TA`` answer tokens in all, ``L`` and ``A`` the
    padded length and longest answer of the left-padded batch it was made from.
    """

    input_ids: torch.Tensor
    """``[1, T]`` token ids of every document, one after another."""
    position_ids: torch.Tensor
    """``[1, T] int64`` positions restarting at 0 on each document."""
    cu_docs: torch.Tensor
    """``[B + 1] int32`` first token of each document (then ``T``)."""
    cu_answers: torch.Tensor
    """``[B + 1] int32`` first answer token of each document on the answer axis (then ``TA``)."""
    prompt_len: torch.Tensor
    """``[B] int64`` tokens before each document's answer."""
    max_doc: int
    """Longest document."""
    max_answer: int
    """Longest answer."""
    answer_index: torch.Tensor
    """``[TA] int64`` packed position of every answer token."""
    answer_pos: torch.Tensor
    """``[B, A] int64`` packed position of answer token ``a`` of document ``b`` (clamped past the answer)."""
    answer_slot: torch.Tensor
    """``[B, A] int64`` index on the answer axis of answer token ``a`` (clamped past the answer)."""
    key_index: torch.Tensor
    """``[B, L] int64`` packed position of padded key ``j`` (clamped on padding)."""
    n_pad: torch.Tensor
    """``[B, 1] int64`` left padding of each example."""


def build_packing(
    input_ids: torch.Tensor, key_mask: torch.Tensor, prompt_len: torch.Tensor, answer_len
) -> Packing:
    """Packs a validated left-padded batch (``[B, L]`` ids and keep mask, ``[B]`` lengths)."""
    device = input_ids.device
    doc_len = key_mask.sum(dim=1)
    starts = torch.cumsum(doc_len, 0) - doc_len
    cu_docs = torch.cat([starts, doc_len.sum().reshape(1)]).to(torch.int32)
    ans_starts = torch.cumsum(answer_len, 0) - answer_len
    cu_answers = torch.cat([ans_starts, answer_len.sum().reshape(1)]).to(torch.int32)
    total = int(cu_docs[-1])
    doc_of = torch.repeat_interleave(torch.arange(len(doc_len), device=device), doc_len, output_size=total)
    position_ids = torch.arange(total, device=device) - starts[doc_of]
    a = torch.arange(int(answer_len.max()), device=device)
    in_answer = a[None, :] < answer_len[:, None]
    answer_pos = (starts + prompt_len)[:, None] + a[None, :]
    n_pad = (key_mask.shape[1] - doc_len)[:, None]
    j = torch.arange(key_mask.shape[1], device=device)
    return Packing(
        input_ids=input_ids[key_mask][None],
        position_ids=position_ids[None],
        cu_docs=cu_docs,
        cu_answers=cu_answers,
        prompt_len=prompt_len,
        max_doc=int(doc_len.max()),
        max_answer=int(answer_len.max()),
        answer_index=answer_pos[in_answer],
        answer_pos=answer_pos.clamp(max=total - 1),
        answer_slot=(ans_starts[:, None] + a[None, :]).clamp(max=int(cu_answers[-1]) - 1),
        key_index=(starts[:, None] + j[None, :] - n_pad).clamp(0, total - 1),
        n_pad=n_pad,
    )


def packed_attention(
    packing: Packing,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    scale: float,
    softcap: float | None,
    window: int | None,
    backend: str,
    prompt_only: bool,
) -> torch.Tensor:
    """Plain attention within documents: ``[T, Hq, D]`` (answer rows 0 when ``prompt_only``).

    Args:
        packing: the documents.
        query: [1, Hq, T, D]. queries of every packed token.
        key: [1, Hkv, T, D]. keys.
        value: [1, Hkv, T, D]. values.
        scale: score scale.
        softcap: soft cap or None.
        window: sliding window or None.
        backend: kernel backend (``"auto"``: the Base kernel on CUDA, SDPA per document otherwise).
        prompt_only: only the rows before each answer (their keys are the prompt's too).
    """
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))  # [T, H, D] views
    used = packing.prompt_len if prompt_only else None
    if resolve_backend(backend, q) == "triton":
        return response_attention_varlen(
            q, k, v, packing.cu_docs, packing.cu_docs, packing.max_doc, packing.max_doc, seqused_q=used,
            seqused_k=used, request=StatsRequest(rows=False), scale=scale, softcap=softcap, window=window,
            backend="triton",
        ).out  # fmt: skip
    out = torch.zeros_like(q)
    bounds = packing.cu_docs.tolist()
    ends = (packing.cu_docs[:-1] + packing.prompt_len).tolist() if prompt_only else bounds[1:]
    for s, e in zip(bounds[:-1], ends, strict=True):
        if e > s and kernel_can_run(query, key, softcap, window, 0.0):  # chunked, no L x L scores
            out[s:e] = base_attention(
                query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], None, scale=scale, softcap=softcap,
                window=window, backend=backend,
            )[0].transpose(0, 1)  # fmt: skip
        elif e > s:
            mask = (
                None
                if window is None
                else visibility(torch.arange(e - s, device=q.device), e - s, None, window)
            )
            out[s:e] = plain_attention(
                query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], mask, scale=scale, softcap=softcap
            )[0].transpose(0, 1)
    return out


def packed_response(
    packing: Packing,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    request: StatsRequest,
    scale: float,
    softcap: float | None,
    window: int | None,
    backend: str,
) -> AttentionResult:
    """The answer rows of every document in one packed statistics call.

    Returns:
        AttentionResult in the varlen layout: ``out`` [TA, Hq, D], row statistics [Hq, TA], columns
        [Hq, T]. Sink positions of ``request`` are ``[B, S]`` positions within each document.
    """
    q = query[0, :, packing.answer_index].transpose(0, 1)  # [TA, Hq, D]
    k, v = (x[0].transpose(0, 1) for x in (key, value))  # [T, Hkv, D] views
    return response_attention_varlen(
        q, k, v, packing.cu_answers, packing.cu_docs, packing.max_answer, packing.max_doc, request=request,
        prompt_len=packing.prompt_len, scale=scale, softcap=softcap, window=window, backend=backend,
    )  # fmt: skip


def unpack_result(packing: Packing, result: AttentionResult, answer_mask: torch.Tensor):
    """Answer-aligned statistics of a packed call: rows ``[B, Hq, A]``, columns ``[B, Hq, L]`` (padded keys).

    Returns:
        ``(rows, lookups, columns)``, each None when not requested; zero past each answer and on padding.
    """
    keep = answer_mask[:, None, :]  # [B, 1, A]
    j = torch.arange(packing.key_index.shape[1], device=keep.device)
    key_keep = j[None, :] >= packing.n_pad  # [B, L] real keys of the left-padded layout

    def take(x: torch.Tensor) -> torch.Tensor:  # [Hq, TA(, S)] -> [B, Hq, A(, S)]
        got = x[:, packing.answer_slot].transpose(0, 1)
        mask = keep if x.ndim == 2 else keep[..., None]
        return torch.where(mask, got, 0.0).float()

    def cols(x: torch.Tensor) -> torch.Tensor:  # [Hq, T] -> [B, Hq, L]
        return torch.where(key_keep[:, None, :], x[:, packing.key_index].transpose(0, 1), 0.0)

    rows = lookups = columns = None
    if result.rows is not None:
        r = result.rows
        rows = RowStats(
            *(
                take(t)
                for t in (r.entropy, r.normalized_entropy, r.prompt_mass, r.max_weight, r.effective_support)
            )
        )
    if result.lookups is not None:
        lk = result.lookups
        lookups = LookupStats(take(lk.diag_log), take(lk.prev_weight), take(lk.sink_weights))
    if result.columns is not None:
        columns = ColumnStats(cols(result.columns.sum), cols(result.columns.mean))
    return rows, lookups, columns
