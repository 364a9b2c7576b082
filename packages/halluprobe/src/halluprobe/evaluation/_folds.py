"""The folds of leave-one-source-out, and the check that each can be fitted (no torch, no scikit-learn).

`halluprobe transfer` runs `check_sources` on the loaded datasets before any extraction, so a source that
cannot be held out is refused at once; `halluprobe.evaluation.leave_one_source_out` runs it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from halubench_data.schema import Example


def held_out_folds(
    examples: Sequence[Example], held_out: Literal["all", "test"]
) -> list[tuple[str, list[Example], list[Example], list[Example]]]:
    """(source, train, validation, target) of every held-out source; shared groups stay out of the fit."""
    by_source: dict[str, list[Example]] = {}
    for e in examples:
        by_source.setdefault(e.source, []).append(e)
    out = []
    for name, own in by_source.items():
        own_groups = {str(e.group) for e in own}
        rest = [e for e in examples if e.source != name and str(e.group) not in own_groups]
        target = own if held_out == "all" else [e for e in own if e.split == "test"]
        train = [e for e in rest if e.split == "train"]
        out.append((name, train, [e for e in rest if e.split == "validation"], target))
    return out


def check_sources(examples: Sequence[Example], held_out: Literal["all", "test"] = "all") -> list[str]:
    """The held-out sources of ``examples``, once every fold is known to fit; checked before any proxy work.

    Raises:
        ValueError: an example id used twice, fewer than two sources, ``held_out`` not ``"all"`` or
            ``"test"``, or a held-out source whose other sources' pooled training or validation split
            lacks a class (or is empty), naming the source and the split.
    """
    ids = [e.id for e in examples]
    if len(set(ids)) != len(ids):
        raise ValueError("datasets: an example id occurs twice; give each example (and source) once")
    if held_out not in ("all", "test"):
        raise ValueError(f"held_out must be 'all' or 'test', got {held_out!r}")
    folds = held_out_folds(examples, held_out)
    if len(folds) < 2:
        raise ValueError(f"leave-one-source-out needs at least two sources, got {[f[0] for f in folds]}")
    for name, tr, va, _ in folds:
        for split, part in (("training", tr), ("validation", va)):
            labels = sorted({int(e.label) for e in part})
            if len(labels) < 2:
                has = "no examples" if not labels else f"only label {labels[0]}"
                raise ValueError(
                    f"holding out {name!r}: the pooled {split} split of the other sources has {has}; "
                    "each needs both labels (0 supported, 1 hallucinated)"
                )
    return [f[0] for f in folds]
