"""Dataset selection: the one spec syntax every CLI and benchmark reads, and the one subsampler.

A dataset spec is one of:

- ``default``: the embedded synthetic dataset (`halubench_data.build_default`);
- ``PATH``: a JSONL file written by `halubench_data.write_jsonl` (an existing file);
- ``NAME:PATH``: the builder ``NAME`` run on the local file or folder ``PATH``, e.g.
  ``ragtruth:../shared/data/ragtruth``, ``ragtruth-qa:../shared/data/ragtruth`` (one task only),
  ``faithbench:data/faithbench``, ``wice:data/llm-aggrefact``. `BUILDERS` lists the names.

``halluprobe --dataset``, ``halujudge --dataset`` and the ``halubench-data`` commands all take a
spec and call `load`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .dataset import Dataset
from .schema import SPLITS, Example

__all__ = ["BUILDERS", "DatasetSpec", "BuildOptions", "load", "parse_spec", "subsample"]

_RAGTRUTH_TASKS = {"ragtruth-qa": "QA", "ragtruth-summary": "Summary", "ragtruth-data2txt": "Data2txt"}
BUILDERS: tuple[str, ...] = (
    "default", "ragtruth", *_RAGTRUTH_TASKS, "ragtruth-original", "halubench", "trivia-plus", "phantom",
    "faithbench", "wice", "lfqa", "claimverify", "expertqa",
)  # fmt: skip
"""Builder names accepted before the colon of a ``NAME:PATH`` spec (``default`` takes no path)."""


@dataclass(frozen=True)
class BuildOptions:
    """Builder settings that a spec does not carry (the CLI flags of ``halubench-data build``)."""

    seed: int = 42
    """Seed of the builders' filters and 70/15/15 group splits."""
    tasks: tuple[str, ...] | None = None
    """RAGTruth tasks to keep (``None``: all, or the one of ``ragtruth-<task>``, which refuses others)."""
    models: tuple[str, ...] | None = None
    """RAGTruth generators to keep (``None``: all)."""
    apply_filters: bool = True
    """HaluBench: length balancing and linking."""
    n_contexts: int = 100
    """``default``: number of synthetic contexts."""


@dataclass(frozen=True)
class DatasetSpec:
    """A parsed dataset spec: a builder name and its source, or a JSONL file."""

    name: str
    """A name of `BUILDERS`, or ``"jsonl"`` for a file."""
    path: Path | None
    """The builder's source or the JSONL file (``None`` for ``default``)."""

    def __str__(self) -> str:
        if self.name == "jsonl":
            return str(self.path)
        return self.name if self.path is None else f"{self.name}:{self.path}"


BUILT_FILE = "dataset.jsonl"
"""The file that ``halubench-data build --out DIR`` writes in ``DIR``; a spec naming ``DIR`` reads it."""


def parse_spec(spec: str) -> DatasetSpec:
    """Parse ``default``, a JSONL path or ``NAME:PATH``.

    Raises:
        ValueError: naming the accepted forms when ``spec`` is none of them or names an unknown builder.
        FileNotFoundError: when the file or source ``PATH`` does not exist.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"a dataset spec is 'default', a JSONL file or NAME:PATH, got {spec!r}")
    if spec == "default":
        return DatasetSpec("default", None)
    file = Path(spec).expanduser()  # '~/x.jsonl' as a builder's '~/source' (unexpanded in --dataset=~/...)
    if file.is_dir() and (file / BUILT_FILE).is_file():  # the --out folder of `halubench-data build`
        return DatasetSpec("jsonl", file / BUILT_FILE)
    if file.is_dir():
        raise ValueError(
            f"dataset {spec!r} is a folder without {BUILT_FILE}; expected 'default', a JSONL file, a folder "
            "written by halubench-data build, or NAME:PATH"
        )
    if file.is_file():
        return DatasetSpec("jsonl", file)
    if file.exists():
        raise ValueError(
            f"dataset {spec!r} is not a regular file (a device, FIFO or socket); expected a JSONL file"
        )
    name, sep, source = spec.partition(":")
    if not sep:
        hint = "no such file" if spec.endswith(".jsonl") or "/" in spec else "not a builder spec"
        raise FileNotFoundError(
            f"dataset {spec!r}: {hint}; expected 'default', an existing JSONL file or NAME:PATH with NAME "
            f"one of {', '.join(BUILDERS[1:])}"
        )
    if name not in BUILDERS or name == "default":
        raise ValueError(
            f"unknown dataset builder {name!r} in {spec!r}; expected one of {', '.join(BUILDERS[1:])}"
        )
    path = Path(source).expanduser()
    if not source or not path.exists():
        raise FileNotFoundError(f"dataset {spec!r}: the source {source!r} of builder {name!r} does not exist")
    return DatasetSpec(name, path)


def _builder(name: str, opts: BuildOptions) -> Callable[[Path], Dataset]:
    from . import builders as b

    if name.startswith("ragtruth"):
        fn = b.build_ragtruth_original if name == "ragtruth-original" else b.build_ragtruth
        own = _RAGTRUTH_TASKS.get(name)
        if own is not None and opts.tasks is not None and set(opts.tasks) != {own}:
            raise ValueError(
                f"dataset builder {name!r} builds the {own} task only, but the tasks asked for are "
                f"{list(opts.tasks)} (--task); use 'ragtruth:PATH' to choose tasks"
            )
        tasks = opts.tasks or ((own,) if own is not None else b.TASKS)
        return lambda p: fn(p, tasks=tasks, models=opts.models, seed=opts.seed)
    if name == "halubench":
        return lambda p: b.build_halubench(p, apply_filters=opts.apply_filters, seed=opts.seed)
    simple: dict[str, Callable[..., Dataset]] = {
        "trivia-plus": b.build_trivia_plus,
        "phantom": b.build_phantom,
        "faithbench": b.build_faithbench,
    }
    if name in simple:
        return lambda p: simple[name](p, seed=opts.seed)
    return lambda p: b.build_claims(name, p, seed=opts.seed)


def load(
    spec: str | DatasetSpec,
    *,
    limit: int | None = None,
    seed: int = 0,
    options: BuildOptions | None = None,
    arg: str | None = None,
) -> Dataset:
    """The dataset of a spec (see the module docstring), optionally subsampled per split.

    Args:
        spec: ``default``, a JSONL file or ``NAME:PATH`` (or a parsed `DatasetSpec`).
        limit: at most this many examples per split (`subsample`); ``None`` keeps all.
        seed: seed of the subsample.
        options: builder settings (seed of splits, RAGTruth tasks and models, ...).
        arg: the command-line argument that gave ``spec`` (e.g. ``"--dataset"``), named first in the
            message of a bad spec or of a malformed JSONL record (then a `ValueError` chained to the
            original error).

    Raises:
        ValueError, FileNotFoundError: see `parse_spec`; a builder's own errors pass through.
    """
    try:
        parsed = parse_spec(spec) if isinstance(spec, str) else spec
    except (ValueError, FileNotFoundError) as exc:
        if arg is None:
            raise
        raise type(exc)(f"{arg}: {exc}") from None
    opts = options or BuildOptions()
    if parsed.name == "default":
        from .default import build_default

        ds = build_default(seed=opts.seed, n_contexts=opts.n_contexts)
    elif parsed.path is None:
        raise ValueError(f"dataset spec {parsed} has no path")
    elif parsed.name == "jsonl":
        from .io import read_jsonl

        try:
            ds = read_jsonl(parsed.path)
        except ValueError as exc:  # a malformed record: ``file:line: field ...``, now led by the flag
            if arg is None:
                raise
            raise ValueError(f"{arg} {exc}") from exc
    else:
        ds = _builder(parsed.name, opts)(parsed.path)
    return ds if limit is None else subsample(ds, limit, seed=seed)


def _take(examples: Sequence[Example], limit: int, seed: int) -> list[Example]:
    """At most ``limit`` examples: a seeded shuffle, labels alternating (1 first) while both remain."""
    pool = list(examples)
    random.Random(seed).shuffle(pool)
    by_label = {lab: [ex for ex in pool if ex.label == lab] for lab in (0, 1)}
    out: list[Example] = []
    while len(out) < min(limit, len(pool)):
        for lab in (1, 0):
            if by_label[lab] and len(out) < limit:
                out.append(by_label[lab].pop(0))
    position = {ex.id: i for i, ex in enumerate(pool)}
    return sorted(out, key=lambda ex: position[ex.id])


def subsample(ds: Dataset, limit: int, *, seed: int = 0) -> Dataset:
    """At most ``limit`` examples of each split, label-balanced where the split allows, seeded.

    Each split is shuffled with ``random.Random(seed)``; examples are then taken alternating
    hallucinated and supported while both remain, so a split with enough of each label gets
    ``ceil(limit / 2)`` hallucinated and ``floor(limit / 2)`` supported examples.

    Raises:
        ValueError: when ``limit < 2`` (a split needs both labels).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 2:
        raise ValueError(f"limit must be an integer >= 2 (examples per split), got {limit!r}")
    kept = [ex for split in SPLITS for ex in _take(ds.split(split).examples, limit, seed)]
    return Dataset(tuple(kept), ds.name)
