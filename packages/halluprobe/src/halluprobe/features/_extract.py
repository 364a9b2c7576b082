"""Feature extraction: one recorded proxy forward per example, reduced to cached records.

[`extract_records`][halluprobe.extract_records] is the resumable loop (any ``compute`` function, batches
sorted by length, one cache shard per batch); [`ProxyExtractor`][halluprobe.ProxyExtractor] is the ``compute``
function that runs [`flashstats_hf.record_forward`][] on a proxy model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from halluprobe.features._cache import FeatureCache
from halluprobe.features._distributed import World, my_batches, run_shard
from halluprobe.features._records import ExampleRecord, reduce_forward


def plan_batches(
    lengths: Sequence[int],
    *,
    batch_size: int,
    token_budget: int | None = None,
    window: int | None = None,
) -> list[list[int]]:
    """Group examples into forwards: sorted by length within windows, then cut by count and token budget.

    The examples are split into consecutive windows of ``window`` (input order), each window is sorted
    by length (ties by position), and the sorted run is cut greedily: a batch grows while it has fewer
    than ``batch_size`` examples and its tokens (the sum of lengths: the cost of a packed forward) stay
    within ``token_budget``. An example longer than the budget runs alone. The plan depends only on the
    lengths, so every process of a distributed run computes the same one.

    Args:
        lengths: tokens (or any cost) of each example.
        batch_size: most examples per batch (>= 1).
        token_budget: most tokens per batch, or None (count only).
        window: examples sorted together, or None (sort all).

    Returns:
        Batches of example indices; every index appears exactly once.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if token_budget is not None and token_budget < 1:
        raise ValueError(f"token_budget must be >= 1 or None, got {token_budget}")
    if window is not None and window < 1:
        raise ValueError(f"window must be >= 1 or None, got {window}")
    n = len(lengths)
    step = window or max(n, 1)
    batches: list[list[int]] = []
    for lo in range(0, n, step):
        order = sorted(range(lo, min(lo + step, n)), key=lambda i: (lengths[i], i))
        current: list[int] = []
        tokens = 0
        for i in order:
            over = token_budget is not None and tokens + lengths[i] > token_budget
            if current and (len(current) >= batch_size or over):
                batches.append(current)
                current, tokens = [], 0
            current.append(i)
            tokens += lengths[i]
        if current:
            batches.append(current)
    return batches


def extract_records(
    examples: Sequence[Any],
    compute: Callable[[list[Any]], list[ExampleRecord]],
    cache: FeatureCache,
    *,
    batch_size: int = 8,
    token_budget: int | None = None,
    window: int | None = None,
    length: Callable[[Any], int] | None = None,
    progress: bool = False,
    desc: str = "extract",
    world: World | None = None,
) -> list[ExampleRecord]:
    """Compute the records of the examples not yet cached, then return all of them in input order.

    Examples are processed in batches of similar length (`plan_batches` over ``length``, default
    the number of characters of context, question and answer); each batch becomes one cache shard
    written atomically, so an interrupted run loses at most the batch in flight and a rerun resumes.

    Args:
        examples: Objects with an ``id`` (``halubench_data.Example``).
        compute: Maps a batch of examples to their records, in order.
        cache: Where records are stored and looked up.
        batch_size: Most examples per forward (>= 1).
        token_budget: Most tokens (``length`` units) per forward; None: ``batch_size`` alone decides.
        window: Examples sorted by length together (None: all of them).
        length: Sort key and cost of an example (its tokens for a token budget).
        progress: Show a tqdm progress bar (rank 0 only, over its own share).
        desc: Label of the progress bar.
        world: The process's place in a distributed run ([`init_world`][halluprobe.init_world]):
            every process plans the same batches, computes its share into its own cache part, and
            rank 0 merges the parts. None: one process.
    """
    world = world if world is not None else World()
    ids = [ex.id for ex in examples]
    if len(set(ids)) != len(ids):
        raise ValueError("extract_records needs distinct example ids")
    if world.main:  # parts left by an interrupted distributed run count as done
        cache.merge_parts()
    world.barrier()
    cache.refresh()
    keys = [cache.key(ex) for ex in examples]
    found = cache.lookup(keys)  # by content and settings: an edited example is computed again
    key = length or (lambda ex: len(ex.context) + len(ex.question) + len(ex.answer))
    todo = [ex for ex, k in zip(examples, keys, strict=True) if k not in found]
    key_of = dict(zip(ids, keys, strict=True))
    lengths = [key(ex) for ex in todo]
    plan = plan_batches(lengths, batch_size=batch_size, token_budget=token_budget, window=window)
    if world.size > 1:
        plan = [plan[i] for i in my_batches([[lengths[j] for j in b] for b in plan], world)]
    batches = [[todo[i] for i in batch] for batch in plan]
    bar = None
    if progress and batches and world.main:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(map(len, batches)), desc=desc, unit="ex")
    try:
        if world.size > 1:
            run_shard(batches, compute, cache, world, on_batch=None if bar is None else bar.update)
        for batch in batches if world.size == 1 else ():
            records = compute(batch)
            if [r.id for r in records] != [ex.id for ex in batch]:
                raise ValueError("compute must return one record per example, in batch order")
            cache.add(records, [key_of[ex.id] for ex in batch])
            found.update({key_of[r.id]: r for r in records})
            if bar is not None:
                bar.update(len(batch))
    finally:
        if bar is not None:
            bar.close()
    if world.size > 1:  # the other ranks' records, merged into the index by rank 0
        found.update(cache.lookup([k for k in keys if k not in found]))
    missing = [i for i, k in zip(ids, keys, strict=True) if k not in found]
    if missing:
        raise KeyError(f"records missing from cache {cache.root} after extraction: {missing[:5]}")
    return [found[k] for k in keys]


@dataclass
class ProxyExtractor:
    """Runs the recorded forward of a proxy on batches of examples and reduces them to records.

    Args:
        model: A causal LM (``flashstats_hf.load_model``).
        tokenizer: Its tokenizer (with a chat template).
        layers: Scored layers (``None``: all).
        hidden_layers: Hidden states kept for H64, numbered as ``record_forward`` does (0 = embeddings,
            ``i`` = output of block ``i - 1``); ``None``: the middle layer's output.
        toha: Also compute TOHA's MTopDiv of every head from the dense response block, which the
            recorded forward materialises for every head of the scored layers (one eager forward per
            batch: with TOHA, ``graph_buckets`` is not used).
        graph_buckets: ``(length_step, rows_step)`` to run each example through
            [`flashstats_hf.GraphedRecorder`][] (one CUDA graph per shape bucket, replayed) instead of
            one eager batched ``record_forward``: the same records, without the eager host cost per
            forward. CUDA models only; ``None`` (default): eager batches.
        backend: Kernel backend of the eager ``record_forward`` (``"auto"``, ``"triton"``, ``"torch"``).
        token_store: Also store every answer token's features and character offsets there
            (`halluprobe.features.TokenStore`, for the token probe); eager batches only.
        reads: A `halluprobe.features._reads.DetectorReads`: eager forwards compute only that (NaN elsewhere);
            None (default): everything.
        contrast: Run the context-contrast forward (a second, plain forward without the context, for
            block C) in a full extraction (default True); with ``reads``, their ``contrast`` decides.
    """

    model: Any
    tokenizer: Any
    layers: tuple[int, ...] | None = None
    hidden_layers: tuple[int, ...] | None = None
    toha: bool = False
    graph_buckets: tuple[int, int] | None = None
    backend: str = "auto"
    token_store: Any = None
    reads: Any = None
    contrast: bool = True
    _lengths: dict[str, int] = field(default_factory=dict, repr=False)
    _graphed: Any = field(default=None, repr=False)
    _weights: str | None = field(default=None, repr=False)

    def __post_init__(self):
        n = int(self.model.config.num_hidden_layers)
        if self.hidden_layers is None:
            self.hidden_layers = (n // 2,)
        if self.layers is not None and any(not 0 <= i < n for i in self.layers):
            raise ValueError(f"layers must lie in [0, {n}); got {self.layers}")
        if self.graph_buckets is not None:
            from flashstats_hf import DEFAULT_REQUEST, GraphedRecorder

            self._graphed = GraphedRecorder(
                self.model, request=DEFAULT_REQUEST, layers=self.layers, buckets=tuple(self.graph_buckets),
                logits=True, hidden_layers=self.hidden_layers, max_graphs=32,
            )  # fmt: skip

    @property
    def settings(self) -> dict[str, Any]:
        """What the records depend on (part of every cache key): proxy, its weights, layers, TOHA, template.

        The weights enter by content (``flashstats_hf.loading.weights_digest``, hashed once per file and
        remembered), so a proxy whose weights change at the same path never reuses the old records. The
        grounding block's and the contrast forward's settings are part of it too, and so are a
        detector's `reads` when the forward computes only them (their records hold NaN elsewhere).
        """
        return self._settings(self.reads)

    @property
    def full_settings(self) -> dict[str, Any]:
        """The `settings` of this extractor's full extraction (no `reads`): its records serve any reads."""
        return self._settings(None)

    def _settings(self, reads: Any) -> dict[str, Any]:
        import hashlib

        from flashstats_hf import LOGIT_STAT_NAMES
        from flashstats_hf.loading import weights_digest

        if self._weights is None:
            self._weights = weights_digest(self.model)
        from halluprobe.features import _contrast
        from halluprobe.features._grounding import SETTINGS_KEY, grounding_settings

        template = getattr(self.tokenizer, "chat_template", None)
        return {
            "logit_stats": len(LOGIT_STAT_NAMES),
            "proxy": str(getattr(self.model.config, "_name_or_path", "") or type(self.model).__name__),
            "weights_sha256": self._weights,
            "layers": list(self.layers) if self.layers is not None else None,
            "hidden_layers": list(self.hidden_layers or ()),
            "toha": bool(self.toha),
            "template_sha256": hashlib.sha256(str(template).encode()).hexdigest(),
            SETTINGS_KEY: grounding_settings(),
            **({_contrast.SETTINGS_KEY: _contrast.contrast_settings()} if self._contrast(reads) else {}),
            # a detector's restricted forward leaves NaN where it reads nothing: never the full key
            **({"reads": asdict(reads)} if reads is not None else {}),
        }

    def encode(self, ex) -> tuple[list[int], int]:
        """Token ids of the formatted example and the index of its first answer token.

        Raises:
            ValueError: the example has more tokens than the proxy has positions
                (``config.max_position_embeddings``). Inputs are never truncated silently: shorten the
                context, drop the example, or use a proxy with a longer context.
        """
        from flashstats_hf import format_example

        ids, start = format_example(self.tokenizer, ex.context, ex.question, ex.answer)
        ids = [int(t) for t in ids]
        self.check_length(len(ids), f"example {ex.id!r}")
        self._lengths[ex.id] = len(ids)
        return ids, int(start)

    def check_length(self, n_tokens: int, what: str) -> None:
        """`ValueError` when ``n_tokens`` exceed the proxy's positions (``config.max_position_embeddings``).

        The one rule of every path that feeds the proxy (batches, ``predict``, streaming): inputs are
        refused, never truncated.
        """
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if isinstance(limit, int) and n_tokens > limit:
            raise ValueError(
                f"{what} has {n_tokens} tokens but the proxy reads at most {limit} positions; "
                "halluprobe refuses rather than truncating: shorten its context or drop it"
            )

    def length(self, ex) -> int:
        """Number of tokens of the formatted example (cached)."""
        if ex.id not in self._lengths:
            self.encode(ex)
        return self._lengths[ex.id]

    @torch.no_grad()
    def forward(self, encoded: list[tuple[list[int], int]]):
        """One recorded forward of a batch of encoded examples (left padding, BOS sink = first real key)."""
        from flashstats_hf import DEFAULT_REQUEST, collate, record_forward

        from halluprobe.features._toha import dense_heads_of

        dev = next(self.model.parameters()).device
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        batch = collate(encoded, pad_token_id=int(pad)).to(dev)
        if self.reads is not None:
            from halluprobe.features._reads import record_reads

            n = int(self.model.config.num_hidden_layers)
            scored = tuple(range(n)) if self.layers is None else tuple(self.layers)
            return record_reads(
                self.model, batch, self.reads, scored, tuple(self.hidden_layers or ()), self.backend
            )
        return record_forward(
            self.model,
            batch.input_ids,
            response_start=batch.response_start,
            attention_mask=batch.attention_mask,
            request=DEFAULT_REQUEST,
            layers=self.layers,
            logits=True,
            hidden_layers=self.hidden_layers,
            backend=self.backend,
            dense_heads=dense_heads_of(self.model, self._layers()) if self.toha else None,
        )

    def _layers(self) -> tuple[int, ...]:
        """The scored layers (all when ``layers`` is None)."""
        if self.layers is not None:
            return tuple(sorted({int(i) for i in self.layers}))
        return tuple(range(int(self.model.config.get_text_config().num_hidden_layers)))

    def __call__(self, batch: list[Any]) -> list[ExampleRecord]:
        """Records of ``batch``, in order, with their text-only grounding features and context contrast.

        The contrast (a second, plain forward without the context) runs when `wants_contrast`.
        """
        from halluprobe.features._grounding import fill_grounding

        encoded = [self.encode(ex) for ex in batch]
        records = fill_grounding(self._records(batch, encoded), batch)
        return self.with_contrast(records, batch, [ids[start:] for ids, start in encoded])

    @property
    def wants_contrast(self) -> bool:
        """Whether records get the context contrast (``contrast`` in a full extraction, else the `reads`')."""
        return self._contrast(self.reads)

    def _contrast(self, reads: Any) -> bool:
        return self.contrast if reads is None else bool(getattr(reads, "contrast", False))

    def with_contrast(
        self,
        records: list[ExampleRecord],
        batch: list[Any],
        answer_ids: list[list[int]] | None = None,
        bare: list[np.ndarray] | None = None,
    ) -> list[ExampleRecord]:
        """``records`` with their context contrast when `wants_contrast` (else as they are).

        Args:
            records: The batch's records, in order.
            batch: Objects with ``id``, ``context``, ``question`` and ``answer``.
            answer_ids: The answer token ids the recorded forward read (default: `encode` of each).
            bare: Their log-probabilities without the context, when read already (a streaming
                `halluprobe.features._contrast.BareFollower`'s); None: the contrast forward runs.
        """
        if not self.wants_contrast:
            return records
        from halluprobe.features._contrast import fill_contrast

        if answer_ids is None:
            answer_ids = [ids[start:] for ids, start in (self.encode(ex) for ex in batch)]
        return fill_contrast(records, [self.encode_bare(ex) for ex in batch], answer_ids, self.model, bare)

    def encode_bare(self, ex) -> list[int]:
        """Token ids of the example's prompt without its context (the contrast forward's prompt)."""
        from halluprobe.features._contrast import bare_prompt

        return bare_prompt(self.tokenizer, ex.question)

    def _records(self, batch: list[Any], encoded: list[tuple[list[int], int]]) -> list[ExampleRecord]:
        if self._graphed is not None:
            if self.token_store is not None:
                raise ValueError("token_store needs eager batches (graph_buckets=None)")
            if not self.toha:  # the dense blocks TOHA reads are not captured in the graphs
                return self._replayed(batch, encoded)
        fs = self.forward(encoded)
        if self.token_store is not None:
            self._store_tokens(batch, encoded, fs)
        mtop = None
        if self.toha:
            from halluprobe.features._toha import recorded_mtopdiv

            mtop = recorded_mtopdiv(fs)
        return reduce_forward(fs, [ex.id for ex in batch], mtopdiv=mtop)

    def _store_tokens(self, batch: list[Any], encoded: list[tuple[list[int], int]], fs) -> None:
        """Write each answer's per-token features and character offsets to `token_store`."""
        from halluprobe.features._token_data import token_offsets, token_parts

        for b, (ex, (ids, start)) in enumerate(zip(batch, encoded, strict=True)):
            parts = token_parts(fs, b, int(fs.answer_len[b]))
            self.token_store.write(ex.id, parts, token_offsets(self.tokenizer, ex.answer, ids[start:]))

    def _replayed(self, batch: list[Any], encoded: list[tuple[list[int], int]]) -> list[ExampleRecord]:
        """Records from graph replays, one example at a time."""
        dev = next(self.model.parameters()).device
        out = []
        for ex, (ids, start) in zip(batch, encoded, strict=True):
            fs = self._graphed(torch.tensor([ids], device=dev), response_start=start)
            out += reduce_forward(fs, [ex.id])
        return out
