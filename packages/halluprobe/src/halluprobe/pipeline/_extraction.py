"""The extraction stage: the proxy loaded once, every example's record from the cache or one forward.

A record is looked up in the run's cache (``out/cache``) and in the ``caches`` folders given, and only
the examples found nowhere run through the proxy. ``halluprobe train`` on one dataset runs under
``torchrun`` too: each process extracts its share and the first one fits (`Extraction.world`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from halubench_data import clikit

from halluprobe.pipeline._options import Inputs, TrainOptions, parse_layers

if TYPE_CHECKING:
    from halluprobe.features._records import ExampleRecord


@dataclass
class Extraction:
    """The loaded proxy, its extractor and the records of a run."""

    model: Any
    """The proxy (a Transformers causal LM)."""
    tokenizer: Any
    """Its tokenizer."""
    extractor: Any
    """The `halluprobe.ProxyExtractor` the records come from."""
    world: Any
    """This process's place in a ``torchrun`` run (`halluprobe.features.World`)."""
    records: dict[str, ExampleRecord]
    """Every example's record, by example id."""

    def head_order(self) -> list[int]:
        """Flat head indices of the scored layers ranked by induction score on the proxy."""
        from halluprobe.blocks._induction import induction_scores, rank_heads

        n = int(self.model.config.num_hidden_layers)
        layers = self.extractor.layers if self.extractor.layers is not None else tuple(range(n))
        return rank_heads(induction_scores(self.model), layers)

    def split(self, examples: Any) -> list[ExampleRecord]:
        """The records of ``examples`` (objects with ``id``), in order."""
        return [self.records[ex.id] for ex in examples]


def start(o: TrainOptions) -> str:
    """After the checks: the resolved device (imports torch), and the claim of the output folder.

    `halubench_data.clikit.claim_out_dir` lists every file the run writes there, and with ``overwrite``
    first removes what earlier runs listed (nothing else).
    """
    device = clikit.resolve_device(o.device)
    clikit.deterministic_kernels(device, o.autotune)
    if o.graphs and not device.startswith("cuda"):
        raise ValueError(f"--graphs replays CUDA graphs and needs a CUDA device, got --device {device}")
    if os.environ.get("RANK", "0") == "0":  # one process of a torchrun claims the folder
        clikit.claim_out_dir(o.out, overwrite=o.overwrite)
    return device


def _parts(o: TrainOptions, inputs: Inputs) -> list[tuple[str, list[Any]]]:
    """``(progress label, examples)`` of every part a run reads (never a test split it does not score)."""
    if o.kind == "transfer":
        return [(ds.name, list(ds.examples)) for ds in inputs.datasets]
    splits = ("train", "validation", "test") if o.kind == "dataset" else ("train", "validation")
    one = len(inputs.datasets) == 1
    return [
        (split if one else f"{ds.name} {split}", list(ds.split(split).examples))
        for ds in inputs.datasets
        for split in splits
    ]


def extract(o: TrainOptions, inputs: Inputs, device: str) -> Extraction:
    """Load the proxy and extract (or find cached) the records of every example the run reads."""
    from flashstats_hf import load_model

    from halluprobe.features._cache import FeatureCache
    from halluprobe.features._distributed import World, close_world, init_world
    from halluprobe.features._extract import ProxyExtractor, extract_records
    from halluprobe.features._grounding import cached_records

    world = init_world(device) if o.kind == "dataset" else World()
    device = world.device(device)
    clikit.quiet_transformers()
    with clikit.loading_model("--proxy", o.proxy or "the default SmolLM2"):
        model, tok = load_model(o.proxy, device=device)
    layers = parse_layers(o.layers, int(model.config.num_hidden_layers))
    ext = ProxyExtractor(
        model, tok, layers, toha=o.toha, graph_buckets=(128, 64) if o.graphs else None
    )  # fmt: skip
    settings = {**ext.settings, "proxy": o.proxy or "default"}
    cache = FeatureCache(o.out / "cache", settings)
    reuse = [cache, *(FeatureCache(folder, settings) for folder in o.caches)] if o.caches else []
    records: dict[str, ExampleRecord] = {}
    try:  # the extraction is the parallel part of a torchrun
        for label, examples in _parts(o, inputs):
            found = cached_records(examples, reuse)  # no proxy run, no copy
            missing = [ex for ex in examples if ex.id not in found]
            found.update(zip([ex.id for ex in missing], extract_records(
                missing, ext, cache, batch_size=o.batch_size, token_budget=o.token_budget,
                length=ext.length, progress=clikit.show_progress(), desc=label, world=world,
            ), strict=True))  # fmt: skip
            records.update(found)
    finally:
        close_world(world)
    return Extraction(model, tok, ext, world, records)
