"""Extraction phase: halluprobe records (resumable cache) plus per-token data for localisation.

halluprobe's :class:`~halluprobe.ProxyExtractor` keeps only pooled statistics; localisation needs every
answer token's statistics and its character offsets in the answer. :class:`TokenExtractor` runs the same
recorded forward once, reduces it with :func:`halluprobe.reduce_forward` for the cache, and additionally
writes one ``.npz`` per example under ``tokens/`` (head-mean per-token statistics of every layer, logit
statistics, character offsets). It also computes TOHA's MTopDiv batched on the device
(:func:`mtopdiv_batched`), because halluprobe's reference implementation loops in Python per head.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from halubench_data.files import atomic_path


def mtopdiv_batched(rows: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """MTopDiv of many heads at once (same graph as :func:`halluprobe.mtopdiv`), Prim's algorithm on device.

    Args:
        rows: ``[N, R, L]`` float. Attention weights of the response rows of ``N`` heads.
        prompt_len: Number of prompt keys ``P`` (``1 <= P <= L - R``).

    Returns:
        ``[N] float64``: minimum spanning tree length of (prompt vertex + R response tokens) / R.
    """
    n, r, length = rows.shape
    if r < 1 or not 1 <= prompt_len <= length - r:
        raise ValueError(
            f"mtopdiv_batched needs [N, R, L] with 1 <= P <= L - R; got {rows.shape}, {prompt_len}"
        )
    w = rows.double()
    start = length - r
    inf = torch.tensor(float("inf"), dtype=torch.float64, device=w.device)
    dist = torch.full((n, r + 1, r + 1), float("inf"), dtype=torch.float64, device=w.device)
    to_prompt = 1.0 - w[:, :, :prompt_len].amax(-1)
    dist[:, 0, 1:] = to_prompt
    dist[:, 1:, 0] = to_prompt
    lower = torch.tril(torch.ones(r, r, dtype=torch.bool, device=w.device), -1)
    sym = torch.where(lower, 1.0 - w[:, :, start:], inf)
    dist[:, 1:, 1:] = torch.minimum(sym, sym.transpose(1, 2))
    in_tree = torch.zeros(n, r + 1, dtype=torch.bool, device=w.device)
    in_tree[:, 0] = True
    best = dist[:, 0].clone()
    total = torch.zeros(n, dtype=torch.float64, device=w.device)
    ar = torch.arange(n, device=w.device)
    for _ in range(r):
        cand = torch.where(in_tree, inf, best)
        v = cand.argmin(1)
        total += cand[ar, v]
        in_tree[ar, v] = True
        best = torch.minimum(best, dist[ar, v])
    return total / r


def token_offsets(tokenizer, answer: str, ids: list[int]) -> np.ndarray:
    """``[A, 2] int32`` character offsets in ``answer`` of each answer token (decoded one by one).

    A token that holds part of a multi-byte character decodes to one replacement character, so offsets
    can drift by a character around such tokens; they are clamped to the answer.
    """
    decoded = tokenizer.decode(ids, clean_up_tokenization_spaces=False)
    base = 0 if answer.startswith(decoded[:1]) else len(answer) - len(answer.lstrip())
    lens = [len(tokenizer.decode([t], clean_up_tokenization_spaces=False)) for t in ids]
    ends = np.cumsum(lens)
    starts = ends - np.asarray(lens)
    off = np.stack([starts, ends], 1) + base
    return np.clip(off, 0, len(answer)).astype(np.int32)


def _token_features(fs, b: int, length: int) -> np.ndarray:
    """``[A, NL * 8 + V] float32`` per-token head-mean attention statistics of every layer + logit stats."""
    from halluprobe.records import head_series

    att = head_series(fs, b, length).mean(1)  # [NL, 8, A]: halluprobe's HEAD_STATS, head means
    att = att.reshape(-1, length).T.cpu().numpy()
    logit = fs.logit_stats[b, :length].float().cpu().numpy()
    return np.concatenate([att, logit], 1).astype(np.float32)


def token_file(root: Path, example_id: str) -> Path:
    """Where the per-token data of one example lives."""
    return Path(root) / (hashlib.sha1(example_id.encode()).hexdigest()[:20] + ".npz")


def _atomic_npz(path: Path, **arrays) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


@dataclass
class TokenExtractor:
    """``compute`` function for :func:`halluprobe.extract_records` that also stores per-token data.

    Args:
        ext: A :class:`halluprobe.ProxyExtractor` (model, tokenizer, layers, hidden layers).
        token_dir: Folder of per-example ``.npz`` files (``None``: keep none).
        toha: Compute TOHA's MTopDiv of every head (dense response block, batched MST on the device).
        backend: Kernel backend for ``record_forward`` (``"auto"``, ``"triton"``, ``"torch"``); if the first
            forward fails on ``"auto"``/``"triton"``, the extractor falls back to ``"torch"`` and says so.
    """

    ext: Any
    token_dir: Path | None = None
    toha: bool = False
    backend: str = "auto"
    log: list[str] = field(default_factory=list)
    seconds: float = 0.0
    count: int = 0

    def _forward(self, encoded):
        from flashstats_hf import DEFAULT_REQUEST, collate, record_forward

        model, tok = self.ext.model, self.ext.tokenizer
        dev = next(model.parameters()).device
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        batch = collate(encoded, pad_token_id=int(pad)).to(dev)
        kw = dict(
            response_start=batch.response_start,
            attention_mask=batch.attention_mask,
            request=DEFAULT_REQUEST,
            layers=self.ext.layers,
            logits=True,
            hidden_layers=self.ext.hidden_layers,
        )
        try:
            return record_forward(model, batch.input_ids, backend=self.backend, **kw)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - a kernel failure must not lose the whole run
            if self.backend == "torch":
                raise
            self.log.append(f"record_forward backend={self.backend} failed ({exc!r}); falling back to torch")
            print(self.log[-1], flush=True)
            self.backend = "torch"
            return record_forward(model, batch.input_ids, backend="torch", **kw)

    @torch.no_grad()
    def _toha(self, encoded, layers) -> torch.Tensor:
        model = self.ext.model
        dev = next(model.parameters()).device
        previous = model.config._attn_implementation
        model.set_attn_implementation("eager")
        out = []
        try:
            for ids, start in encoded:
                att = model(
                    input_ids=torch.tensor([ids], device=dev), output_attentions=True, use_cache=False
                )
                rows = torch.cat([att.attentions[i][0, :, start:, :] for i in layers])  # [NL*H, R, L]
                out.append(mtopdiv_batched(rows, start).view(len(layers), -1).float().cpu())
        finally:
            model.set_attn_implementation(previous)
        return torch.stack(out)

    def __call__(self, batch: list[Any]):
        """Records of ``batch``; a batch that runs out of device memory is redone one example at a time."""
        if len(batch) > 1:
            try:
                return self._run(batch)
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                self.log.append(f"out of memory on a batch of {len(batch)}; redone one by one")
                print(self.log[-1], flush=True)
                return [r for ex in batch for r in self._run([ex])]
        return self._run(batch)

    def _run(self, batch: list[Any]):
        from halluprobe import reduce_forward

        t0 = time.perf_counter()
        encoded = [self.ext.encode(ex) for ex in batch]
        fs = self._forward(encoded)
        mtop = self._toha(encoded, fs.layers) if self.toha else None
        records = reduce_forward(fs, [ex.id for ex in batch], mtopdiv=mtop)
        if self.token_dir is not None:
            for b, (ex, (ids, start)) in enumerate(zip(batch, encoded, strict=True)):
                length = int(fs.answer_len[b])
                _atomic_npz(
                    token_file(self.token_dir, ex.id),
                    feats=_token_features(fs, b, length).astype(np.float16),
                    offsets=token_offsets(self.ext.tokenizer, ex.answer, ids[start:]),
                )
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.seconds += time.perf_counter() - t0
        self.count += len(batch)
        return records
