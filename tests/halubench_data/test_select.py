"""The one dataset spec syntax (``halubench_data.load``) and the one seeded subsampler."""

from pathlib import Path

import numpy as np
import pytest
from halubench_data import BuildOptions, DatasetSpec, build_default, load, parse_spec, subsample, write_jsonl

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def test_parse_spec_forms(tmp_path):
    path = write_jsonl(build_default(n_contexts=4, questions_per_context=1), tmp_path / "d.jsonl")
    assert parse_spec("default") == DatasetSpec("default", None)
    assert parse_spec(str(path)) == DatasetSpec("jsonl", path)
    assert parse_spec(f"wice:{tmp_path}") == DatasetSpec("wice", tmp_path)
    assert str(parse_spec(f"ragtruth-qa:{tmp_path}")) == f"ragtruth-qa:{tmp_path}"


def test_a_jsonl_path_under_home_is_expanded_as_a_builder_source_is(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    path = write_jsonl(build_default(n_contexts=4, questions_per_context=1), tmp_path / "d.jsonl")
    assert parse_spec("~/d.jsonl") == DatasetSpec("jsonl", path)
    assert parse_spec("ragtruth:~/d.jsonl") == DatasetSpec("ragtruth", path)


@pytest.mark.parametrize(
    ("spec", "error", "match"),
    [
        ("", ValueError, "'default', a JSONL file or NAME:PATH"),
        ("missing.jsonl", FileNotFoundError, "no such file"),
        ("ragtruth", FileNotFoundError, "NAME:PATH with NAME one of"),
        ("nosuch:/tmp", ValueError, "unknown dataset builder 'nosuch'"),
        ("default:/tmp", ValueError, "unknown dataset builder 'default'"),
        ("wice:/no/such/folder", FileNotFoundError, "does not exist"),
    ],
)
def test_parse_spec_errors_name_the_accepted_forms(spec, error, match):
    with pytest.raises(error, match=match):
        parse_spec(spec)


def test_load_default_and_jsonl_round_trip(tmp_path):
    ds = load("default", options=BuildOptions(n_contexts=4))
    assert len(ds) == len(build_default(n_contexts=4)) == 24 and ds.name == "default"
    path = write_jsonl(ds, tmp_path / "d.jsonl")
    assert [ex.id for ex in load(str(path))] == [ex.id for ex in ds]


def test_subsample_is_seeded_label_balanced_and_per_split():
    ds = build_default(n_contexts=20)
    a, b, c = subsample(ds, 7, seed=0), subsample(ds, 7, seed=0), subsample(ds, 7, seed=1)
    assert [ex.id for ex in a] == [ex.id for ex in b]
    assert [ex.id for ex in a] != [ex.id for ex in c]
    for split in ("train", "validation", "test"):
        part = a.split(split)
        assert len(part) == 7 and int(part.labels.sum()) == 4  # ceil(7/2) hallucinated first
        full = [ex.id for ex in ds.split(split)]
        assert set(ex.id for ex in part) <= set(full)
    assert load("default", limit=7, options=BuildOptions(n_contexts=20)).examples == a.examples


def test_subsample_keeps_what_a_small_split_has():
    ds = build_default(n_contexts=4, questions_per_context=1)
    small = subsample(ds, 1000)
    assert sorted(ex.id for ex in small) == sorted(ex.id for ex in ds)
    one_label = ds.filter(lambda ex: ex.label == 1)
    assert np.all(subsample(one_label, 3).labels == 1)


@pytest.mark.parametrize("limit", [1, 0, -3, 2.5, True])
def test_subsample_rejects_bad_limits(limit):
    with pytest.raises(ValueError, match="limit must be an integer >= 2"):
        subsample(build_default(n_contexts=4), limit)


@pytest.mark.skipif(not (DATA / "ragtruth").is_dir(), reason=f"shared data not found at {DATA}")
def test_ragtruth_task_names_select_one_task():
    qa = load(f"ragtruth-qa:{DATA / 'ragtruth'}", options=BuildOptions(models=("llama-2-70b-chat",)))
    assert len(qa) == 137 and {ex.meta["task"] for ex in qa} == {"QA"}
