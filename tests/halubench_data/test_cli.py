import json
import subprocess
import sys
from pathlib import Path

import pytest
from halubench_data import read_jsonl
from halubench_data.cli import build_parser, main

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def test_help_does_not_import_the_ml_stack():
    code = (
        "import sys\n"
        "from halubench_data.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('sklearn', 'datasets', 'torch', 'scipy') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_parser_takes_a_dataset_spec():
    args = build_parser().parse_args(["build", "--dataset", "lfqa:x", "--out", "y"])
    assert (args.dataset, args.spec, args.out, args.overwrite) == ("lfqa:x", None, "y", False)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["build", "lfqa", "--source", "x", "--out", "y"])


def test_build_default_stats_and_overwrite(tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    assert main(["build", "default", "--out", str(out), "--n-contexts", "20"]) == 0
    assert len(read_jsonl(out)) == 120
    assert "wrote 120 examples" in capsys.readouterr().out
    assert main(["build", "default", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert len(read_jsonl(out)) == 120  # untouched
    assert main(["build", "default", "--out", str(out), "--overwrite"]) == 0
    assert len(read_jsonl(out)) == 600
    capsys.readouterr()
    assert main(["stats", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| default | 1 | 216 | 42 | 42 | 300 |" in printed
    assert main(["baselines", str(out), "--n-bootstrap", "100"]) == 0
    assert "| tfidf | " in capsys.readouterr().out


def test_build_reports_bad_specs(tmp_path, capsys):
    assert main(["build", "wice", "--out", str(tmp_path / "w.jsonl")]) == 2
    assert "NAME:PATH" in capsys.readouterr().err
    assert main(["build", f"wice:{tmp_path / 'nope'}", "--out", str(tmp_path / "w.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["build", f"nosuch:{tmp_path}", "--out", str(tmp_path / "w.jsonl")]) == 2
    assert "unknown dataset builder 'nosuch'" in capsys.readouterr().err
    assert not (tmp_path / "w.jsonl").exists()


@pytest.mark.skipif(not (DATA / "ragtruth").is_dir(), reason=f"shared data not found at {DATA}")
def test_build_ragtruth_llama_qa_prints_counts(tmp_path, capsys):
    out = tmp_path / "rt.jsonl"
    argv = ["build", f"ragtruth:{DATA / 'ragtruth'}", "--out", str(out)]
    assert main([*argv, "--task", "QA", "--model", "llama-2-70b-chat"]) == 0
    printed = capsys.readouterr()
    assert (
        "kept 137" in printed.err and "| all | both | 97 | 20 | 20 | 137 |" in printed.out
    )  # steps on stderr


@pytest.mark.skipif(not (DATA / "ragtruth").is_dir(), reason=f"shared data not found at {DATA}")
def test_build_that_keeps_nothing_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "rt.jsonl"
    argv = ["build", f"ragtruth:{DATA / 'ragtruth'}", "--out", str(out), "--model", "nobody"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "kept no examples" in err and "ragtruth:" in err and not out.exists()


def test_every_command_prints_its_documented_json(tmp_path, capsys):
    from halubench_data.cli import JSON_BASELINES, JSON_BUILD, JSON_STATS

    out = tmp_path / "d.jsonl"
    assert main(["build", "default", "--out", str(out), "--n-contexts", "20", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == set(JSON_BUILD) and doc["out"] == str(out) and doc["n_examples"] == 120
    assert sum(c["n"] for c in doc["counts"]) == 120 and doc["report"]["n_kept"] == 120
    assert main(["stats", str(out), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert set(stats) == set(JSON_STATS) and stats["counts"] == doc["counts"]
    assert stats["n_groups"] == len({ex.group for ex in read_jsonl(out)})
    n_test = sum(c["n"] for c in stats["counts"] if c["split"] == "test")
    assert main(["baselines", str(out), "--n-bootstrap", "50", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert set(res) == set(JSON_BASELINES)
    assert set(res["methods"]) == {"length", "tfidf", "overlap floor", "grounding floor"}
    assert res["best_floor"]["auroc"] == max(
        res["methods"][f]["auroc"] for f in ("overlap floor", "grounding floor")
    )
    tfidf = res["methods"]["tfidf"]
    assert tfidf["n"] == n_test and tfidf["n_bootstrap"] == 50 and 0 <= tfidf["auroc"] <= 1


@pytest.mark.skipif(not (DATA / "ragtruth").is_dir(), reason=f"shared data not found at {DATA}")
def test_build_json_reports_what_the_builder_kept(tmp_path, capsys):
    argv = ["build", f"ragtruth:{DATA / 'ragtruth'}", "--out", str(tmp_path / "rt.jsonl"), "--task", "QA",
            "--model", "llama-2-70b-chat", "--json"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr()
    doc = json.loads(printed.out)
    assert doc["n_examples"] == 137 and doc["report"]["n_kept"] == 137 and "kept 137" in printed.err


def test_build_to_a_path_under_a_file_fails_before_building(tmp_path, capsys, monkeypatch):
    import halubench_data.cli

    def no_build(args):
        raise AssertionError("the dataset was built")

    monkeypatch.setattr(halubench_data.cli, "_build", no_build)
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "sub" / "x.jsonl"
    assert main(["build", "default", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {out}: {tmp_path / 'afile'} is a file" in err


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--task", "QA"], "--task and --generator apply to the ragtruth builders"),
        (["--generator", "gpt-4"], "--task and --generator apply to the ragtruth builders"),
        (["--model", "gpt-4"], "--task and --generator apply to the ragtruth builders"),
        (["--no-filter"], "--no-filter applies to the halubench builder"),
        (["--n-contexts", "8"], "--n-contexts applies to 'default'"),
    ],
)
def test_build_refuses_a_builder_flag_it_would_ignore(tmp_path, capsys, flags, match):
    spec = "default" if "--n-contexts" not in flags else f"wice:{tmp_path}"
    out = tmp_path / "x.jsonl"
    assert main(["build", spec, "--out", str(out), *flags]) == 2
    assert match in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize(
    ("spec", "flags", "match"),
    [
        ("ragtruth-qa:SRC", ["--task", "Summary"], "'ragtruth-qa' builds the QA task only"),
        ("ragtruth-summary:SRC", ["--task", "Summary", "--task", "QA"], "builds the Summary task only"),
        ("default", ["--n-contexts", "2"], "--n-contexts must be an even number >= 12"),
        ("default", ["--n-contexts", "10"], "--n-contexts must be an even number >= 12"),
    ],
)
def test_build_refuses_options_that_contradict_the_builder(tmp_path, capsys, spec, flags, match):
    out = tmp_path / "x"
    assert main(["build", "--dataset", spec.replace("SRC", str(tmp_path)), "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_the_fewest_default_contexts_fill_every_split(tmp_path):
    out = tmp_path / "d"
    assert main(["build", "--dataset", "default", "--out", str(out), "--n-contexts", "12"]) == 0
    ds = read_jsonl(out / "dataset.jsonl")
    assert all(len(ds.split(s).examples) > 0 for s in ("train", "validation", "test"))


@pytest.mark.parametrize("command", ["stats", "baselines", "build"])
@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("EMPTY", "EMPTY holds no examples"),
        ("faithbench:BAD", "faithbench:BAD: the builder kept no examples"),
    ],
)
def test_a_dataset_without_examples_is_bad_input_not_a_table_of_zeros(tmp_path, capsys, command, spec, match):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    paths = {"EMPTY": str(tmp_path / "empty.jsonl"), "BAD": str(tmp_path / "bad.jsonl")}
    for key, path in paths.items():
        spec, match = spec.replace(key, path), match.replace(key, path)
    out = tmp_path / "out.jsonl"
    extra = ["--out", str(out)] if command == "build" else []
    assert main([command, spec, *extra, "--json"]) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and match in printed.err and not out.exists()
    if spec.startswith("faithbench:"):  # the builder's load report says what it dropped, on stderr
        assert "bad.jsonl:1: field '<json>': malformed JSON" in printed.err


def test_build_to_a_file_says_it_expects_a_folder(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["build", "--dataset", "default", "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err
    assert f"--out {tmp_path / 'f'} is a file; expected a folder" in err and "--overwrite" not in err
