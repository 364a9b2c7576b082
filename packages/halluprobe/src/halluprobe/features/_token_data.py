"""Per-token data of answers for the token probe: feature views, character offsets, the token store.

One recorded forward gives, for every answer token, blocks of features (`token_parts`): the attention
statistics of every scored layer (`halluprobe.features.HEAD_STATS`) averaged over heads and of every
head, the recorded hidden states and the logit statistics. A view (`TOKEN_VIEWS`) is a concatenation
of some of them (`compose_view`, `token_features`). `token_offsets` places each token in the answer's
characters; `TokenExample` pairs an answer's features with its annotated characters; `TokenStore`
keeps the blocks of many answers on disk during extraction (`token_examples` runs an extractor over
examples to build them, in `halluprobe.features`). The token probe, span decoding and the
span metric are in `halluprobe.localisation`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from halubench_data import Span

if TYPE_CHECKING:
    from flashstats_hf.types import ForwardStats

__all__ = [
    "TOKEN_PARTS",
    "TOKEN_VIEWS",
    "TokenExample",
    "TokenStore",
    "char_mask",
    "check_view",
    "compose_view",
    "token_features",
    "token_offsets",
    "token_parts",
]


TOKEN_VIEWS: tuple[str, ...] = ("mean", "heads", "mean+hidden", "heads+hidden")
"""Per-token feature views (`token_features`): attention statistics averaged over heads (``mean``) or of
every head (``heads``), optionally with the recorded hidden states (``+hidden``); logit statistics always."""
TOKEN_PARTS: tuple[str, ...] = ("mean", "heads", "hidden", "logits")
"""The blocks a view is assembled from (`token_parts`, stored by `TokenStore`)."""


def check_view(view: str) -> str:
    """``view`` when it is one of `TOKEN_VIEWS`, else a ValueError naming them."""
    if view not in TOKEN_VIEWS:
        raise ValueError(f"unknown token feature view {view!r}; expected one of {TOKEN_VIEWS}")
    return view


def token_parts(fs: ForwardStats, b: int, length: int) -> dict[str, np.ndarray]:
    """The per-token blocks of example ``b`` (float32, non-finite values as 0), keyed by `TOKEN_PARTS`.

    - ``mean``: ``[A, NL * 8]`` head-mean `halluprobe.features.HEAD_STATS` of every scored layer
      (columns ordered layer, statistic);
    - ``heads``: ``[A, NL * H * 8]`` the same statistics of every head (layer, head, statistic);
    - ``hidden``: ``[A, NH * Dm]`` the recorded hidden states at the answer tokens (``[A, 0]`` when the
      forward kept none);
    - ``logits``: ``[A, V]`` logit statistics.

    Args:
        fs: A `flashstats_hf.types.ForwardStats` with rows, lookups and logit statistics.
        b: Example index in the batch.
        length: Its answer length ``A``.
    """
    from halluprobe.features._records import head_series

    if fs.logit_stats is None:
        raise ValueError("token features need the forward's logit statistics (record with logits=True)")
    series = head_series(fs, b, length)  # [NL, H, len(HEAD_STATS), A]
    hidden = (
        fs.hidden[b, :, :length].float().permute(1, 0, 2).reshape(length, -1).cpu().numpy()
        if fs.hidden is not None
        else np.zeros((length, 0), np.float32)
    )
    parts = {
        "mean": series.mean(1).reshape(-1, length).T.numpy(),
        "heads": series.reshape(-1, length).T.numpy(),
        "hidden": hidden,
        "logits": fs.logit_stats[b, :length].float().cpu().numpy(),
    }
    return {k: np.nan_to_num(v.astype(np.float32), nan=0.0, posinf=0.0, neginf=0.0) for k, v in parts.items()}


def compose_view(parts: dict[str, np.ndarray], view: str = "mean") -> np.ndarray:
    """``[A, F] float32`` features of ``view`` from `token_parts`: attention block, hidden states, logits.

    The logit statistics are always the last ``V`` columns (the answer token's log-probability first).
    """
    att, _, hid = check_view(view).partition("+")
    blocks = [parts[att]] + ([parts["hidden"]] if hid else []) + [parts["logits"]]
    if hid and parts["hidden"].shape[1] == 0:
        raise ValueError(f"token view {view!r} needs hidden states (record the forward with hidden_layers)")
    return np.concatenate(blocks, 1).astype(np.float32)


def token_features(fs: ForwardStats, b: int, length: int, view: str = "mean") -> np.ndarray:
    """``[A, F] float32``: the per-token features of one view (`TOKEN_VIEWS`) of example ``b``.

    ``view="mean"`` (the default): ``[A, NL * 8 + V]`` head-mean attention statistics of every layer and
    the logit statistics; ``"heads"``: every head's (``[A, NL * H * 8 + V]``); ``+hidden`` adds the
    recorded hidden states before the logit statistics. Non-finite values (an undefined statistic) become 0.

    Args:
        fs: A `flashstats_hf.types.ForwardStats` with rows, lookups and logit statistics.
        b: Example index in the batch.
        length: Its answer length ``A``.
        view: One of `TOKEN_VIEWS`.
    """
    check_view(view)
    return compose_view(token_parts(fs, b, length), view)


def token_offsets(
    tokenizer, answer: str, ids: Sequence[int], pieces: Sequence[str] | None = None
) -> np.ndarray:
    """``[A, 2] int32`` character offsets in ``answer`` of each answer token.

    Each token is decoded on its own, except the tokens of a byte-level vocabulary that split a
    multi-byte character (CJK, emoji, accented letters): decoded alone they give U+FFFD, which is not
    the character's length, so such a run is decoded together and each of its tokens gets the
    characters its bytes belong to. Offsets therefore never drift after such a character; they are
    clamped to the answer. ``pieces``: each token already decoded on its own (saves those calls).
    """
    ids = [int(t) for t in ids]
    if pieces is not None and len(pieces) != len(ids):
        raise ValueError(f"token_offsets got {len(pieces)} decoded pieces for {len(ids)} tokens")
    decoded = tokenizer.decode(ids, clean_up_tokenization_spaces=False)
    base = 0 if answer.startswith(decoded[:1]) else len(answer) - len(answer.lstrip())
    off = np.zeros((len(ids), 2), dtype=np.int64)
    i, pos = 0, 0
    while i < len(ids):
        piece = (
            pieces[i]
            if pieces is not None
            else tokenizer.decode([ids[i]], clean_up_tokenization_spaces=False)
        )
        group = _split_character_run(tokenizer, ids, i, decoded, pos) if "\ufffd" in piece else None
        if group is None:
            off[i] = pos, pos + len(piece)
            i, pos = i + 1, pos + len(piece)
            continue
        for k, (a, b) in enumerate(group):
            off[i + k] = pos + a, pos + b
        i, pos = i + len(group), pos + group[-1][1]
    return np.clip(off + base, 0, len(answer)).astype(np.int32)


def _split_character_run(
    tokenizer, ids: list[int], i: int, decoded: str, pos: int, max_run: int = 64
) -> list[tuple[int, int]] | None:
    """Offsets, relative to ``pos``, of the run of tokens from ``i`` that ends on a character boundary.

    The run is the shortest ``ids[i:j]`` whose text is ``decoded`` at ``pos`` (no U+FFFD left); token
    ``k`` of it covers the characters from the first one its prefix leaves incomplete to the last one
    it touches. ``None`` when no run of at most ``max_run`` tokens decodes cleanly.
    """
    prefixes = []
    for j in range(i + 1, min(len(ids), i + max_run) + 1):
        text = tokenizer.decode(ids[i:j], clean_up_tokenization_spaces=False)
        prefixes.append(text)
        if decoded.startswith(text, pos):
            break
    else:
        return None
    done = [0]  # characters complete after each prefix
    for text in prefixes:
        n = 0
        while n < len(text) and pos + n < len(decoded) and text[n] == decoded[pos + n]:
            n += 1
        done.append(n)
    out = []
    for k, text in enumerate(prefixes):
        partial = done[k + 1] < len(text)  # this token leaves a character incomplete
        out.append((done[k], done[k + 1] + int(partial)))
    return out


def char_mask(spans: Sequence[Span], n_chars: int) -> np.ndarray:
    """``[n_chars] bool``: True on every character inside one of ``spans``."""
    mask = np.zeros(n_chars, dtype=bool)
    for sp in spans:
        mask[sp.start : sp.end] = True
    return mask


@dataclass(frozen=True)
class TokenExample:
    """One answer's per-token inputs and its annotated characters."""

    features: np.ndarray
    """``[A, F] float32``: `token_features`."""
    offsets: np.ndarray
    """``[A, 2] int``: token character offsets in the answer."""
    gold: np.ndarray
    """``[n_chars] bool``: annotated (hallucinated) characters of the answer."""
    group: str = ""
    """Bootstrap unit (the example's group)."""

    @property
    def labels(self) -> np.ndarray:
        """``[A] int64``: 1 when the token overlaps an annotated character."""
        return np.array([self.gold[a:b].any() if b > a else False for a, b in self.offsets], dtype=np.int64)


@dataclass(frozen=True)
class TokenStore:
    """A folder of per-answer token data (`token_parts` as float16, `token_offsets`), one ``.npz`` each.

    Written during extraction (`halluprobe.ProxyExtractor`'s ``token_store``), read back as
    `TokenExample` objects of any view (`TOKEN_VIEWS`) with the answer's annotated characters.
    """

    root: Path
    """The folder."""

    def path(self, example_id: str) -> Path:
        """Where the data of one example lives (a hash of its id)."""
        import hashlib

        return Path(self.root) / (hashlib.sha1(example_id.encode()).hexdigest()[:20] + ".npz")

    def write(self, example_id: str, parts: dict[str, np.ndarray], offsets: np.ndarray) -> None:
        """Store one answer's `token_parts` (float16, ``[A, *]`` each) and ``[A, 2]`` offsets atomically."""
        from halubench_data.files import atomic_path

        missing = [k for k in TOKEN_PARTS if k not in parts]
        if missing:
            raise ValueError(
                f"token parts {missing} missing; expected the blocks {TOKEN_PARTS} (token_parts)"
            )
        n = len(offsets)
        if any(len(parts[k]) != n for k in TOKEN_PARTS):
            raise ValueError(f"every token part must have {n} rows (one per offset)")
        arrays: dict[str, np.ndarray] = {k: np.asarray(parts[k]).astype(np.float16) for k in TOKEN_PARTS}
        arrays["offsets"] = np.asarray(offsets)
        with atomic_path(self.path(example_id)) as tmp, open(tmp, "wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]

    def example(self, ex, view: str = "mean") -> TokenExample:
        """The `TokenExample` of a ``halubench_data.Example`` in ``view`` (float32, non-finite as 0)."""
        check_view(view)
        path = self.path(ex.id)
        with np.load(path) as z:
            if not set(TOKEN_PARTS) <= set(z.files):
                raise ValueError(
                    f"{path}: not a token store file of this version (expected arrays {TOKEN_PARTS})"
                )
            parts = {
                k: np.nan_to_num(z[k].astype(np.float32), nan=0.0, posinf=0.0, neginf=0.0)
                for k in TOKEN_PARTS
            }
            offsets = z["offsets"]
        return TokenExample(
            compose_view(parts, view), offsets, char_mask(ex.spans, len(ex.answer)), str(ex.group)
        )
