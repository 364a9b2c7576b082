"""Bad command lines are refused by name, in one line, before torch is imported.

Each case runs the CLI's ``main`` in a fresh interpreter and asserts that torch is not in
``sys.modules`` after the refusal: the checks of flags and paths come before the ML stack loads.
"""

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
from halluprobe.cli._main import parse_layers
from halubench_data import load, write_jsonl

RUN = (
    "import json, sys\n"
    "from {module} import main\n"
    "rc = main(json.loads(sys.argv[1]))\n"
    "print(json.dumps([rc, 'torch' in sys.modules]))\n"
)


def refuse(argv, module="halluprobe.cli", env=None):
    """Exit status, whether torch was imported, and stderr of ``main(argv)`` in a fresh process."""
    run = subprocess.run(
        [sys.executable, "-c", RUN.format(module=module), json.dumps(argv)],
        capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120,
    )  # fmt: skip
    rc, torch_loaded = json.loads(run.stdout.strip().splitlines()[-1])
    return rc, torch_loaded, run.stderr


def assert_refused(argv, match, **kw) -> str:
    """Assert a one-line refusal naming ``match``, before torch; return the refusal."""
    rc, torch_loaded, err = refuse(argv, **kw)
    assert rc == 2, err
    assert match in err and len(err.strip().splitlines()) == 1, err
    assert not torch_loaded, f"torch was imported before refusing: {err}"
    return err


@pytest.fixture
def detector_dir(tmp_path):
    """A folder whose detector.json is written by the test."""
    folder = tmp_path / "det"
    folder.mkdir()
    return folder


def test_a_missing_detector_is_named_at_once(tmp_path):
    argv = ["predict", str(tmp_path / "nope"), "--context", "c", "--answer", "a"]
    assert_refused(argv, f"detector folder {tmp_path / 'nope'} does not exist")
    assert_refused(["stream", str(tmp_path / "nope"), "--context", "c", "--answer", "a"], "does not exist")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("[" * 100_000 + "]" * 100_000, "detector.json is not a valid detector file: nests too deeply"),
        (
            '{"threshold": NaN}',
            "detector.json is not a valid detector file: it holds the non-finite number NaN",
        ),
        (None, "detector.json is not a regular file"),  # a folder named detector.json
    ],
)
def test_a_malformed_detector_json_is_named(detector_dir, content, match):
    if content is None:
        (detector_dir / "detector.json").mkdir()
    else:
        (detector_dir / "detector.json").write_text(content)
    assert_refused(["predict", str(detector_dir), "--context", "c", "--answer", "a"], match)


def test_a_nan_threshold_is_refused_by_detector_load_naming_the_file(detector_dir):
    from halluprobe import Detector

    (detector_dir / "detector.json").write_text('{"threshold": NaN}')
    with pytest.raises(ValueError, match=r"det/detector.json .*non-finite number NaN"):
        Detector.load(detector_dir)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["predict", "{det}", "--input", "/dev/zero"], "--input /dev/zero is not a regular file"),
        (["train", "--a7-selection", "/dev/zero"], "--a7-selection /dev/zero is not a regular file"),
        (["train", "--dataset", "/dev/null"], "'/dev/null' is not a regular file"),
        (["train", "--layers", "3-"], "--layers expects e.g. '0-11' or '3,5,7', got '3-'"),
        (["train", "--device", ""], "--device '' is not a device"),
        (["train", "--proxy", ""], "--proxy is empty"),
        (["extract", "--out", ""], "--out is empty"),
        (["extract", "--out", "/proc/x"], "--out /proc/x: /proc is not writable"),
        (
            ["stream", "{det}", "--context", "c", "--generate", "--sample", "--temperature", "nan"],
            "--temperature",
        ),
        (
            ["stream", "{det}", "--context", "c", "--generate", "--sample", "--temperature", "inf"],
            "--temperature",
        ),
    ],
)
def test_bad_flags_and_special_files_are_refused_by_name(tmp_path, argv, match):
    argv = [a.format(det=tmp_path) for a in argv]
    if argv[0] in ("train", "extract") and "--out" not in argv:
        argv += ["--out", str(tmp_path / "run")]
    assert_refused(argv, match)


def test_train_refuses_a_folder_of_an_earlier_run_and_overwrite_clears_it(tmp_path):
    run = tmp_path / "run"
    (run / "detectors" / "A7").mkdir(parents=True)
    (run / "detectors" / "A7" / "probe.json").write_text("{}")
    (run / ".outputs").write_text("detectors/A7/probe.json\n")
    (run / "cache").mkdir()
    assert_refused(
        ["train", "--out", str(run)],
        f"--out {run} holds the outputs of an earlier run (detectors/A7/probe.json)",
    )
    from halubench_data.clikit import check_out_dir, claim_out_dir, release_outputs

    check_out_dir(run, overwrite=True)
    claim_out_dir(run, overwrite=True)
    release_outputs()
    assert [p.name for p in run.iterdir()] == ["cache"]  # the feature cache is kept


def test_token_probe_without_spans_fails_before_the_proxy(tmp_path):
    ds = load("default")
    no_spans = replace(ds, examples=[replace(e, spans=()) for e in ds.examples])
    data = write_jsonl(no_spans, tmp_path / "d.jsonl")
    argv = ["train", "--token-probe", "--dataset", str(data), "--out", str(tmp_path / "run")]
    assert_refused(argv, "--token-probe needs annotated spans in the training split")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("module", "argv", "flag", "name"),
    [
        ("halluprobe.cli", ["train", "--proxy", "someorg/missing-model"], "--proxy", "someorg/missing-model"),
        (
            "halujudge.cli",
            ["evaluate", "--judge", "someorg/missing-model", "--dataset", "default"],
            "--judge",
            "someorg/missing-model",
        ),
        # a bare hub id (no organisation): one line too, not the hub client's retries
        ("halujudge.cli", ["evaluate", "--judge", "nosuch", "--dataset", "default"], "--judge", "nosuch"),
    ],
    ids=["proxy", "judge", "judge-bare-name"],
)
def test_an_uncached_hub_id_fails_at_once_when_offline(tmp_path, module, argv, flag, name):
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    argv = [*argv, "--out", str(tmp_path / "run")]
    err = assert_refused(argv, f"{flag} {name}: not in the local Hugging Face cache", module=module, env=env)
    assert "offline" in err


def test_a_judge_alias_is_left_to_the_loader(monkeypatch):
    from halubench_data import cliargs, clikit

    def to_the_hub(*args):
        raise RuntimeError("went to the hub")

    monkeypatch.setattr(cliargs, "check_hub_id", to_the_hub)
    clikit.check_model_arg("smollm2", "--judge", ("smollm2",))
    with pytest.raises(RuntimeError, match="went to the hub"):
        clikit.check_model_arg("smollm2", "--proxy")


def test_build_from_a_folder_names_the_file_it_expects(tmp_path):
    (tmp_path / "empty").mkdir()
    argv = ["build", "--dataset", f"halubench:{tmp_path / 'empty'}", "--out", str(tmp_path / "o")]
    assert_refused(
        argv, "is a folder; this builder reads one file of rows: .jsonl", module="halubench_data.cli"
    )


def test_layers_with_an_open_range_are_refused():
    with pytest.raises(ValueError, match="--layers"):
        parse_layers("3-")
    assert parse_layers("3") == (3,)


def test_a_nan_judge_cache_entry_names_the_file_and_line(tmp_path):
    from halujudge.cache import ScoreCache

    path = tmp_path / "cache.jsonl"
    line = {"model": "m", "method": "t", "id": "a", "text_hash": "h", "score": float("nan")}
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match=r"cache.jsonl:1: malformed cache line \(score nan is not a finite"):
        ScoreCache(path)


def test_a_detector_whose_hub_proxy_is_not_cached_fails_at_once_when_offline(detector_dir, tmp_path):
    from halluprobe.detectors._default import packaged_path

    doc = json.loads((packaged_path() / "detector.json").read_text())  # every field valid
    (detector_dir / "detector.json").write_text(json.dumps({**doc, "proxy": "someorg/missing-model"}))
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    argv = ["predict", str(detector_dir), "--context", "c", "--answer", "a"]
    assert_refused(argv, "the proxy of detector", env=env)


def _sources(tmp_path, **changes):
    """Two JSONL sources 'a' and 'b' (train, validation and test, both labels), ``changes`` applied to 'b'."""
    from halubench_data import Dataset, Example

    files = []
    for name in "ab":
        rows = [
            Example(f"{name}{i}", name, "Ada lives in Lyon.", "Where?", "In Lyon." if i % 2 else "In Rome.",
                    i % 2, f"{name}g{i}", ("train", "validation", "test")[i % 3])
            for i in range(12)
        ]  # fmt: skip
        if name == "b":
            rows = [replace(e, **{k: v(e) for k, v in changes.items()}) for e in rows]
        files += ["--dataset", str(write_jsonl(Dataset(tuple(rows), name=name), tmp_path / f"{name}.jsonl"))]
    return files


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"source": lambda e: "a", "id": lambda e: "x" + e.id, "group": lambda e: "x" + e.group},
         "leave-one-source-out needs at least two sources"),
        ({"label": lambda e: 1}, "the pooled training split of the other sources has only label 1"),
        ({"split": lambda e: "train"}, "the pooled validation split of the other sources has no examples"),
    ],
    ids=["one-source", "one-label", "no-validation"],
)  # fmt: skip
def test_transfer_refuses_sources_that_cannot_fold_before_any_extraction(tmp_path, changes, match):
    out = tmp_path / "run"
    assert_refused(["transfer", *_sources(tmp_path, **changes), "--out", str(out), "--device", "cpu"], match)
    assert not out.exists()  # no OUT/cache left behind


def test_refusals_that_came_after_the_proxy_loaded_come_at_once(tmp_path):
    assert_refused(["serve", str(tmp_path / "nonexistent")], "does not exist")
    assert_refused(["serve", "/etc"], "/etc/detector.json is missing")
    assert_refused(["train", "--feature-sets", "XYZ", "--out", str(tmp_path / "r")], "XYZ")
    env = {"HALLUPROBE_DETECTOR": str(tmp_path / "nonexistent")}
    assert_refused(["predict", "--context", "c", "--answer", "a"], "HALLUPROBE_DETECTOR=", env=env)


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--max-wait-ms", "inf"], "--max-wait-ms must be a finite number"),
        (["--max-wait-ms", "nan"], "--max-wait-ms must be a finite number"),
        (["--max-wait-ms", "60000"], "--max-wait-ms must be at most 10000"),
        (["--header-timeout", "0"], "--header-timeout must be > 0"),
        (["--host", ""], "--host '' is not an address"),
        (["--host", "999.1.1.1"], "--host '999.1.1.1' is not an address"),
        (["--port", "70000"], "--port must be in 0..65535"),
    ],
)
def test_serve_flags_are_refused_at_once(flags, match):
    assert_refused(["serve", *flags], match)


def test_serve_refuses_a_port_in_use_at_once():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert_refused(["serve", "--port", str(port)], f"cannot listen on 127.0.0.1:{port}")
