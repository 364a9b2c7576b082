"""``halluprobe train --general``, the default detector (``halluprobe.load()``, ``predict`` without a path),
and the packaged detector's place in the wheel."""

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
from halluprobe import Detector, load
from halluprobe.cli import main
from halluprobe.detectors._default import ENV_VAR, PACKAGED, packaged_path
from halubench_data import Dataset, Example, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
WORDS = "amber basil cedar delta ember fjord grove heron iris juniper kelp lotus".split()


def _jsonl(path: Path, name: str, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    exs = []
    for split, n in (("train", 10), ("validation", 8), ("test", 4)):
        for i in range(n):
            ctx = list(rng.choice(WORDS[:8], 5, replace=False))
            answer = list(rng.choice(ctx, 2)) + ([str(rng.choice(WORDS[8:]))] if i % 2 else [])
            exs.append(Example(f"{name}{split}{i}", name, " ".join(ctx), "which", " ".join(answer), i % 2,
                               f"{name}g{split}{i // 2}", split))  # fmt: skip
    return write_jsonl(Dataset(tuple(exs), name=name), path / f"{name}.jsonl")


@pytest.fixture
def no_default(monkeypatch, tmp_path):
    """No packaged detector (an empty package folder) and no override, whatever this checkout holds."""
    import halluprobe.detectors._default as dd

    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(dd, "packaged_path", lambda: tmp_path / "not-packaged")


@pytest.mark.slow
def test_general_training_then_predict_with_no_detector_path(
    char_proxy, tmp_path, monkeypatch, capsys, no_default
):
    specs = [str(_jsonl(tmp_path, n, s)) for n, s in (("alpha", 0), ("beta", 1), ("gamma", 2))]
    datasets = [a for s in specs for a in ("--dataset", s)]
    argv = ["train", "--general", *datasets, "--out", str(tmp_path / "run"), "--feature-sets", "GL9,GA7L9",
            "--device", "cpu", "--json"]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    chosen, folder = next(iter(doc["detectors"].items()))
    assert folder == str(tmp_path / "run" / "detector") and chosen in ("GL9", "GA7L9")
    res = doc["results"]
    assert res["feature_set"] == chosen and set(res["loso_auroc"]) == {"GL9", "GA7L9"}
    assert set(res["loso_auroc"][chosen]) == {"alpha", "beta", "gamma"}
    assert json.loads((tmp_path / "run" / "general.json").read_text()) == res
    # again from the first run's cache (--cache): no example runs through the proxy, the same bytes come out
    argv2 = [*argv[: argv.index("--out")], "--out", str(tmp_path / "run2"), *argv[argv.index("--out") + 2 :]]
    assert main([*argv2, "--cache", str(tmp_path / "run" / "cache")]) == 0
    capsys.readouterr()
    assert not (tmp_path / "run2" / "cache" / "index.json").exists()
    for name in ("detector.json", "detector.safetensors"):
        assert (tmp_path / "run2" / "detector" / name).read_bytes() == (Path(folder) / name).read_bytes()
    # the documented override names the default detector; predict uses it and says so
    monkeypatch.setenv(ENV_VAR, folder)
    assert main(["predict", "--context", "amber basil", "--answer", "kelp", "--device", "cpu", "--json"]) == 0
    out, err = capsys.readouterr()
    assert f"detector: {ENV_VAR}={folder}" in err
    pred = json.loads(out)
    want = Detector.load(folder).predict_text("amber basil", "", "kelp", device="cpu")
    assert pred["probability"] == pytest.approx(want.probability, abs=1e-6) and pred["label"] == want.label


def test_without_a_packaged_detector_loading_fails_in_one_line(no_default, capsys):
    assert main(["predict", "--context", "amber basil", "--answer", "kelp", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "no packaged general detector" in err and "halluprobe train --general" in err
    assert len(err.strip().splitlines()) == 1
    with pytest.raises(FileNotFoundError, match="halluprobe/packaged/general/detector.json is missing"):
        load()


def test_load_returns_the_default_or_the_named_detector(record_factory, tmp_path, monkeypatch, no_default):
    from halluprobe.training._protocol import fit_blocks, make_blocks

    rng = np.random.default_rng(0)
    recs = [record_factory(f"r{i}", rng) for i in range(20)]
    y = np.arange(20) % 2
    det = Detector.from_probe(
        fit_blocks(make_blocks("L9", [0], 1), "L9", recs[:12], y[:12], recs[12:], y[12:]), hidden_layers=(1,)
    )
    folder = det.save(tmp_path / "mine")
    assert load(folder).source == folder  # a path: that detector
    monkeypatch.setenv(ENV_VAR, str(folder))  # read when load() runs, never at import
    assert load().source == folder
    np.testing.assert_array_equal(load().score_records(recs), det.score_records(recs))
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "absent"))
    with pytest.raises(FileNotFoundError, match=f"{ENV_VAR}=.*absent.*detector.json is missing"):
        load()


def test_general_flags_are_checked_before_the_proxy_loads(tmp_path, capsys):
    spec = str(_jsonl(tmp_path, "alpha", 0))
    cases = [
        (["train", "--dataset", spec, "--dataset", spec + "x"], "several --dataset need --general"),
        (["train", "--general", "--dataset", spec], "--general needs at least two --dataset sources"),
        (["train", "--general", "--dataset", spec, "--dataset", spec], "--dataset repeats a source"),
        (
            ["train", "--general", "--dataset", spec, "--dataset", "default", "--toha"],
            "--toha does not apply",
        ),
        (["train", "--dataset", spec, "--cache", str(tmp_path)], "--cache applies to --general only"),
        (
            ["train", "--dataset", spec, "--threshold-rule", "mean-f1"],
            "--threshold-rule applies to --general",
        ),
        (
            ["train", "--general", "--dataset", spec, "--dataset", "default", "--threshold-rule", "f1"],
            "--threshold-rule: threshold rule must be one of",
        ),
        (["train", "--general", "--dataset", spec, "--dataset", "default", "--feature-sets", "GQ"], "GQ"),
    ]
    for argv, message in cases:
        assert main([*argv, "--device", "cpu"]) == 2, argv
        assert message in capsys.readouterr().err


def test_predict_help_names_the_default_detector(capsys):
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    assert "packaged with halluprobe" in " ".join(capsys.readouterr().out.split())


@pytest.mark.slow
def test_the_wheel_ships_the_packaged_detector_folder(tmp_path):
    """A copy of the package with a packaged detector builds a wheel that holds both of its files."""
    if shutil.which("uv") is None:
        pytest.skip("uv is not on PATH")
    src = tmp_path / "halluprobe"
    shutil.copytree(ROOT / "packages" / "halluprobe", src, ignore=shutil.ignore_patterns("__pycache__"))
    folder = src / "src" / "halluprobe" / Path(*PACKAGED)
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("detector.json", "detector.safetensors"):
        (folder / name).write_bytes(b"{}")
    subprocess.run(
        ["uv", "build", "--wheel", "--no-sources", "--out-dir", str(tmp_path / "dist"), "--quiet"],
        cwd=src, check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("halluprobe-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        f"halluprobe/{'/'.join(PACKAGED)}/{n}" for n in ("detector.json", "detector.safetensors")
    } <= names
    assert packaged_path().parts[-3:] == ("halluprobe", *PACKAGED)
