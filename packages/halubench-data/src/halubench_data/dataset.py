"""A collection of examples with split views and the report of what loading dropped."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from .schema import SPLITS, Example, Split


@dataclass(frozen=True)
class Drop:
    """One input record that was not turned into an ``Example``, and why."""

    path: str
    """File (or other source) the record came from."""
    line: int
    """1-based line number (or record number for non-line formats)."""
    field: str
    """Name of the offending field (``"<json>"`` for a line that is not JSON)."""
    reason: str
    """Human-readable cause."""

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: field {self.field!r}: {self.reason}"


@dataclass(frozen=True)
class LoadReport:
    """What a reader or builder kept and dropped. Nothing is dropped without a ``Drop`` here."""

    source: str
    """Where the records came from."""
    n_read: int
    """Records read (lines, rows or responses, depending on the builder)."""
    n_kept: int
    """Records that became examples."""
    drops: tuple[Drop, ...] = ()
    """Every dropped record with file, line and field."""
    filtered: Mapping[str, int] = field(default_factory=dict)
    """Records removed on purpose by a documented filter (e.g. ``{"task!=QA": 1800}``), by filter name."""

    @property
    def n_dropped(self) -> int:
        """Number of records dropped as invalid."""
        return len(self.drops)

    def drop_counts(self) -> dict[str, int]:
        """Dropped records counted by offending field."""
        return dict(Counter(d.field for d in self.drops))

    def summary(self, max_lines: int = 10) -> str:
        """A few lines for a terminal: counts, filters and the first ``max_lines`` drops."""
        lines = [f"{self.source}: read {self.n_read}, kept {self.n_kept}, dropped {self.n_dropped} invalid"]
        for name, n in self.filtered.items():
            lines.append(f"  filtered by {name}: {n}")
        for name, n in sorted(self.drop_counts().items()):
            lines.append(f"  invalid {name}: {n}")
        lines.extend(f"  {d}" for d in self.drops[:max_lines])
        if self.n_dropped > max_lines:
            lines.append(f"  ... and {self.n_dropped - max_lines} more")
        return "\n".join(lines)


@dataclass(frozen=True)
class Dataset:
    """An immutable list of ``Example`` with ``train``/``validation``/``test`` views.

    Raises:
        ValueError: when two examples share an ``id``.
    """

    examples: tuple[Example, ...]
    """The examples, in a fixed order."""
    name: str = "dataset"
    """Short name used in reports and tables."""
    report: LoadReport | None = None
    """What loading or building dropped, when the dataset came from files."""

    def __post_init__(self) -> None:
        examples = tuple(self.examples)
        for ex in examples:
            if not isinstance(ex, Example):
                raise TypeError(f"Dataset holds Example, got {type(ex).__name__}")
        dup = [i for i, n in Counter(ex.id for ex in examples).items() if n > 1]
        if dup:
            raise ValueError(f"duplicate example ids in {self.name!r}: {dup[:5]}")
        object.__setattr__(self, "examples", examples)

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self) -> Iterator[Example]:
        return iter(self.examples)

    def __getitem__(self, i: int) -> Example:
        return self.examples[i]

    def split(self, name: Split) -> Dataset:
        """The examples of one split, as a ``Dataset`` (no report)."""
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        return Dataset(tuple(ex for ex in self.examples if ex.split == name), f"{self.name}/{name}")

    @property
    def train(self) -> Dataset:
        """The ``train`` split."""
        return self.split("train")

    @property
    def validation(self) -> Dataset:
        """The ``validation`` split."""
        return self.split("validation")

    @property
    def test(self) -> Dataset:
        """The ``test`` split."""
        return self.split("test")

    @property
    def labels(self) -> np.ndarray:
        """labels: [N] int64. 1 = hallucinated, 0 = supported."""
        return np.array([ex.label for ex in self.examples], dtype=np.int64)

    @property
    def groups(self) -> list[str]:
        """Group id of every example, in order."""
        return [ex.group for ex in self.examples]

    @property
    def answers(self) -> list[str]:
        """Answer of every example, in order."""
        return [ex.answer for ex in self.examples]

    def filter(self, keep: Callable[[Example], bool]) -> Dataset:
        """The examples for which ``keep`` is true."""
        return Dataset(tuple(ex for ex in self.examples if keep(ex)), self.name)

    def with_splits(self, split_of_group: Mapping[str, Split]) -> Dataset:
        """A copy with every example's split set from its group.

        Raises:
            ValueError: when a group has no split in ``split_of_group``.
        """
        missing = sorted({ex.group for ex in self.examples} - set(split_of_group))
        if missing:
            raise ValueError(f"no split given for groups {missing[:5]} ({len(missing)} in all)")
        return Dataset(
            tuple(replace(ex, split=split_of_group[ex.group]) for ex in self.examples), self.name, self.report
        )

    def check_groups(self) -> None:
        """Raise ``ValueError`` when a group crosses splits or an example has no split."""
        seen: dict[str, Split | None] = {}
        for ex in self.examples:
            if ex.split is None:
                raise ValueError(f"example {ex.id!r} has no split")
            if seen.setdefault(ex.group, ex.split) != ex.split:
                raise ValueError(f"group {ex.group!r} crosses splits {seen[ex.group]!r} and {ex.split!r}")

    def counts(self) -> dict[tuple[str, int, str], int]:
        """Example counts keyed by ``(source, label, split)``; split ``"-"`` when unset."""
        return dict(Counter((ex.source, ex.label, ex.split or "-") for ex in self.examples))

    def stats_table(self) -> str:
        """A Markdown table of counts per source, label and split, with group counts."""
        splits = [*SPLITS, "-"] if any(ex.split is None for ex in self.examples) else list(SPLITS)
        counts = self.counts()
        header = "| source | label | " + " | ".join(splits) + " | total |"
        rows = [header, "|" + "---|" * (len(splits) + 3)]
        for source in sorted({ex.source for ex in self.examples}):
            for label in (0, 1):
                n = [counts.get((source, label, s), 0) for s in splits]
                rows.append(f"| {source} | {label} | " + " | ".join(map(str, n)) + f" | {sum(n)} |")
        n_all = [sum(v for k, v in counts.items() if k[2] == s) for s in splits]
        rows.append("| all | both | " + " | ".join(map(str, n_all)) + f" | {len(self)} |")
        groups = {s: {ex.group for ex in self.examples if (ex.split or "-") == s} for s in splits}
        rows.append(
            "| groups | - | "
            + " | ".join(str(len(groups[s])) for s in splits)
            + f" | {len(set(self.groups))} |"
        )
        return "\n".join(rows)


def concat(datasets: Iterable[Dataset], name: str = "dataset") -> Dataset:
    """Concatenate datasets (ids must stay unique)."""
    return Dataset(tuple(ex for ds in datasets for ex in ds.examples), name)
