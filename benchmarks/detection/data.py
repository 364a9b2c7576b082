"""The evaluation's datasets: built once from ``../shared/data`` and frozen as JSONL files.

Every later phase (extraction, judge, analysis) reads the frozen JSONL files, so the device machine,
which has no ``../shared``, only needs the folder written here (a few MiB).
"""

from __future__ import annotations

import json
from pathlib import Path

from halubench_data.sampling import balanced, first_per_label, shortest_per_split, uniform, uniform_per_split

MAIN = ("ragtruth_qa", "ragtruth_qa_llama", "ragtruth_summary", "ragtruth_data2txt", "faithbench")
"""Datasets of the main table (each split 70/15/15 by group, seed 42, by its builder)."""
RAGTRUTH_TASKS = ("ragtruth_qa", "ragtruth_summary", "ragtruth_data2txt")
"""The three RAGTruth tasks (cross-task transfer, localisation)."""
CLAIMS = ("claims_wice", "claims_lfqa", "claims_claimverify", "claims_expertqa")
"""Claim-level transfer targets (subsampled, see :data:`CLAIM_SAMPLE`)."""
CLAIM_SAMPLE = 300
"""At most this many claims of each claim set (uniform sample, seed 42) are scored."""
ALL = MAIN + CLAIMS


def shared_data_root() -> Path:
    """``<repo>/../shared/data``."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _build_all(root: Path) -> dict:
    """Every dataset, named by the spec syntax that every CLI shares (``halubench_data.load``)."""
    import halubench_data as hd

    rt, agg = root / "ragtruth", root / "llm-aggrefact"
    llama = hd.BuildOptions(models=("llama-2-70b-chat",))
    out = {
        "ragtruth_qa": hd.load(f"ragtruth-qa:{rt}"),
        "ragtruth_qa_llama": hd.load(f"ragtruth-qa:{rt}", options=llama),
        "ragtruth_summary": hd.load(f"ragtruth-summary:{rt}"),
        "ragtruth_data2txt": hd.load(f"ragtruth-data2txt:{rt}"),
        "faithbench": hd.load(f"faithbench:{root / 'faithbench'}"),
    }
    claims = {f"claims_{n}": hd.load(f"{n}:{agg}") for n in ("wice", "lfqa", "claimverify")}
    claims["claims_expertqa"] = hd.load(f"expertqa:{root / 'expertqa'}")
    out.update({name: uniform(hd.Dataset(ds.examples, name), CLAIM_SAMPLE) for name, ds in claims.items()})
    return out


def prepare(
    out: Path, root: Path | None = None, limit: int | None = None, subset: int | None = None, only=None
) -> dict[str, int]:
    """Build every dataset and write ``out/<name>.jsonl`` (+ ``out/manifest.json``).

    Args:
        out: Destination folder.
        root: The shared data folder (default ``../shared/data``).
        limit: Dry run: at most ``limit`` examples per split (claim sets: ``limit`` in all), the shortest.
        subset: At most ``subset`` random examples per split (claim sets: ``subset`` in all, label-balanced).
        only: Dataset names to write (default all).

    Returns:
        Examples written per dataset.
    """
    import halubench_data as hd

    root = Path(root) if root else shared_data_root()
    if not (root / "ragtruth").is_dir():
        raise FileNotFoundError(f"no shared data at {root} (expected ragtruth/, faithbench/, ...)")
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, ds in _build_all(root).items():
        if only and name not in only:
            continue
        ds = hd.Dataset(ds.examples, name)
        if subset is not None:
            ds = uniform_per_split(ds, subset) if name not in CLAIMS else balanced(ds, subset)
        if limit is not None:
            ds = first_per_label(ds, limit) if name in CLAIMS else shortest_per_split(ds, limit)
        hd.write_jsonl(ds, out / f"{name}.jsonl", overwrite=True)
        counts[name] = len(ds)
    manifest = {
        "limit": limit,
        "subset": subset,
        "claim_sample": CLAIM_SAMPLE,
        "counts": counts,
        "source": str(root),
    }
    hd.atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=1), overwrite=True)
    return counts


def load(data_dir: Path, names=None) -> dict:
    """The frozen datasets ``{name: Dataset}`` (``None``: every dataset present in ``data_dir``)."""
    import halubench_data as hd

    if names is None:
        names = [n for n in ALL if (Path(data_dir) / f"{n}.jsonl").is_file()]
    out = {}
    for name in names:
        path = Path(data_dir) / f"{name}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: run the 'prepare' phase first")
        ds = hd.read_jsonl(path)
        out[name] = hd.Dataset(ds.examples, name)
    return out
