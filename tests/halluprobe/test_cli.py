import json
import subprocess
import sys
from dataclasses import replace

import pytest
from halluprobe.cli._main import DEFAULT_TRAIN_LIMIT, build_parser, main, parse_layers, parse_limit


def test_parser_builds_without_heavy_imports():
    code = (
        "import sys\n"
        "from halluprobe.cli import build_parser\n"
        "p = build_parser()\n"
        "p.parse_args(['train'])\n"
        "heavy = [m for m in ('torch', 'sklearn', 'transformers', 'flashstats_hf') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_of_every_command():
    for cmd in ([], ["train"], ["extract"], ["select-a7"], ["select-l9"], ["evaluate"], ["predict"]):
        out = subprocess.run(
            [sys.executable, "-m", "halluprobe", *cmd, "--help"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert "usage: halluprobe" in out.stdout


def test_train_defaults_and_options():
    args = build_parser().parse_args(["train"])
    # --dataset may repeat (train --general); unset it means 'default', as --feature-sets DEFAULT_FEATURE_SETS
    assert args.dataset is None and args.out == "runs/default" and args.limit == "auto"
    assert args.proxy is None and args.device == "auto" and args.layers is None
    assert args.feature_sets is None and not args.general and args.cache is None
    assert args.token_view == "mean+hidden" and not args.token_probe
    assert build_parser().parse_args(["train", "--token-view", "heads"]).token_view == "heads"
    with pytest.raises(SystemExit) as exc:  # not a view: argparse's usage error
        build_parser().parse_args(["train", "--token-view", "hidden"])
    assert exc.value.code == 2
    args = build_parser().parse_args(
        ["train", "--dataset", "x.jsonl", "--proxy", "p", "--feature-sets", "A7,ALL", "--device", "cpu",
         "--out", "o", "--limit", "10", "--layers", "0-2,5"]
    )  # fmt: skip
    assert (args.dataset, args.proxy, args.limit, args.out) == (["x.jsonl"], "p", "10", "o")
    args = build_parser().parse_args(["predict", "d", "--input", "a.jsonl", "--json", "--batch-size", "4"])
    assert (str(args.input), args.json, args.batch_size, args.context) == ("a.jsonl", True, 4, None)
    assert main(["predict", "d", "--device", "cpu"]) == 2  # neither --context/--answer nor --input


def test_selection_commands_and_train_options(tmp_path):
    from halluprobe.blocks import Selection
    from halluprobe.cli._main import train_options
    from halluprobe.pipeline._options import _read_selections

    def _selections(args):
        return _read_selections(train_options(args))

    a7 = build_parser().parse_args(["select-a7"])
    assert (a7.split, a7.n_features, a7.out) == ("train", 7, "runs/select")
    assert build_parser().parse_args(["select-l9", "--n-features", "5"]).n_features == 5
    args = build_parser().parse_args(["train"])
    assert args.a7_selection is None and args.l9_selection is None and _selections(args) == {}
    path = Selection("L9", ("entropy.max", "top_prob_3.min"), {}).save(tmp_path / "l9.json")
    args = build_parser().parse_args(["train", "--l9-selection", str(path)])
    assert _selections(args) == {"l9_features": ("entropy.max", "top_prob_3.min")}
    args = build_parser().parse_args(["train", "--a7-selection", str(path)])
    with pytest.raises(ValueError, match="expected A7"):
        _selections(args)


def test_parse_layers():
    assert parse_layers(None) is None
    assert parse_layers("0-2,5") == (0, 1, 2, 5)
    assert parse_layers("3") == (3,)
    with pytest.raises(ValueError, match="--layers"):
        parse_layers("a-b")


def test_parse_limit():
    assert parse_limit("auto", "default") == DEFAULT_TRAIN_LIMIT
    assert parse_limit("auto", "x.jsonl") is None
    assert parse_limit("all", "default") is None
    assert parse_limit("12", "default") == 12
    with pytest.raises(ValueError, match="--limit"):
        parse_limit("lots", "default")


def test_main_reports_bad_input(capsys):
    assert main(["train", "--feature-sets", "A9", "--dataset", "bogus"]) == 2
    assert "error" in capsys.readouterr().err


def test_graphs_flag_needs_cuda(capsys):
    assert main(["extract", "--graphs", "--device", "cpu", "--limit", "4"]) == 2
    assert "--graphs replays CUDA graphs and needs a CUDA device" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["predict", "DET", "--input", "MISSING"], "--input MISSING: no such file"),
        (["predict", "DET", "--input", "FOLDER"], "--input FOLDER is a folder; expected a file"),
        (["train", "--a7-selection", "MISSING"], "--a7-selection MISSING: no such file"),
        (["train", "--l9-selection", "FOLDER"], "--l9-selection FOLDER is a folder; expected a file"),
        (["extract", "--proxy", "./no/such.gguf"], "--proxy ./no/such.gguf: no such file or folder"),
    ],
)
def test_a_missing_input_file_is_named_by_its_flag(tmp_path, capsys, argv, match):
    paths = {"DET": str(tmp_path), "MISSING": str(tmp_path / "missing.json"), "FOLDER": str(tmp_path)}
    argv = [paths.get(a, a) for a in argv]
    match = match.replace("MISSING", paths["MISSING"]).replace("FOLDER", paths["FOLDER"])
    assert main([*argv, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1 and "Errno" not in err


def test_predict_refuses_a_batch_size_it_would_ignore(tmp_path, capsys):
    argv = [
        "predict",
        str(tmp_path),
        "--context",
        "c",
        "--answer",
        "a",
        "--batch-size",
        "4",
        "--device",
        "cpu",
    ]
    assert main(argv) == 2
    assert "--batch-size applies to --input only" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_end_to_end_on_smollm2(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(
        ["train", "--limit", "4", "--out", str(out), "--feature-sets", "A7,A64,L9,A7L9", "--batch-size", "4"]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    for name in ("A7", "A64", "A7L9", "LookbackLens", "RAUQ", "text-only tfidf"):
        assert f"| {name} |" in printed
    report = (out / "report.md").read_text()
    assert "roc.png" in report and (out / "roc.png").stat().st_size > 0 and (out / "pr.png").exists()
    results = json.loads((out / "results.json").read_text())
    assert set(results["datasets"]["default"]["methods"]) >= {"A7", "A7L9", "LookbackLens", "text-only tfidf"}
    assert results["datasets"]["default"]["methods"]["A7"]["kind"] == "probe"
    assert [t["b"] for t in results["paired_tests"]] == ["A7L9"] and results["selection"]["A7"]["C"] > 0
    assert json.loads((out / "detectors" / "A7L9" / "detector.json").read_text())["feature_set"] == "A7L9"
    shards = sorted(p.name for p in (out / "cache").glob("shard-*"))
    det = str(out / "detectors" / "A7L9")
    assert main(["predict", det, "--context", "Ada lives in Lyon.", "--question", "Where?", "--answer",
                 "Ada lives in Rome.", "--tokens"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "p(hallucinated)" in printed and "Rome" in printed
    assert main(["evaluate", det, "--limit", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert "A7L9 (test)" in printed.out and "dataset default: 4 test examples" in printed.err
    # evaluate found every test record in the run's cache: no new shard
    assert sorted(p.name for p in (out / "cache").glob("shard-*")) == shards
    # the same ids with other answers (an edited dataset) are extracted again, never read stale
    from halubench_data import build_default, write_jsonl

    edited = [replace(ex, answer=ex.answer + " Indeed.") for ex in build_default().examples]
    write_jsonl(edited, tmp_path / "edited.jsonl")
    assert main(["evaluate", det, "--dataset", str(tmp_path / "edited.jsonl"), "--limit", "4",
                 "--out", str(out)]) == 0  # fmt: skip
    assert len(list((out / "cache").glob("shard-*"))) > len(shards)


@pytest.mark.parametrize("flag", [["--graphs"], ["--proxy", "p"], ["--layers", "0-3"]])
def test_evaluate_has_no_proxy_options_that_it_would_refuse_or_ignore(tmp_path, capsys, flag):
    evaluate = build_parser()._subparsers._group_actions[0].choices["evaluate"]  # noqa: SLF001
    assert flag[0] not in {opt for action in evaluate._actions for opt in action.option_strings}  # noqa: SLF001
    with pytest.raises(SystemExit) as ex:
        main(["evaluate", str(tmp_path), *flag, "--device", "cpu", "--limit", "4"])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and f"unrecognized arguments: {' '.join(flag)}" in err


def _one_label_validation(path):
    """The default set with every validation answer relabelled supported (no hallucinated one left)."""
    from halubench_data import build_default, write_jsonl

    examples = build_default(n_contexts=10).examples
    write_jsonl([replace(ex, label=0, spans=()) if ex.split == "validation" else ex for ex in examples], path)
    return path


@pytest.mark.parametrize(
    ("command", "make", "match"),
    [
        ("train", lambda p: p.write_text(""), "the train split has 0 examples"),
        ("train", _one_label_validation, "the validation split has 0 hallucinated"),
        ("select-a7", lambda p: p.write_text(""), "the train split has 0 examples"),
    ],
)
def test_a_split_without_both_labels_is_refused_before_the_proxy_loads(
    tmp_path, capsys, monkeypatch, command, make, match
):
    import flashstats_hf

    def no_proxy(*args, **kwargs):
        raise AssertionError("the proxy was loaded")

    monkeypatch.setattr(flashstats_hf, "load_model", no_proxy)
    data = tmp_path / "data.jsonl"
    make(data)
    out = tmp_path / "run"
    assert main([command, "--dataset", str(data), "--device", "cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--dataset {data}: {match}" in err and not out.exists()


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["extract", "--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        (["train", "--token-budget", "0"], "--token-budget must be >= 1, got 0"),
        (["evaluate", "DET", "--batch-size", "-1"], "--batch-size must be >= 1, got -1"),
        (["select-a7", "--n-features", "0"], "--n-features must be in 1..22 (the A7 candidates), got 0"),
        (["select-l9", "--n-features", "225"], "--n-features must be in 1..224 (the L9 candidates), got 225"),
        (["train", "--a7-selection", "MISSING"], "missing.json"),
        (["train", "--token-cv", "5"], "--token-cv applies to the token probe: add --token-probe"),
        (["train", "--token-probe", "--token-cv", "1"], "--token-cv must be 0 (validation) or at least 2"),
        (["train", "--token-probe", "--token-cv", "50"], "--token-cv 50: the train and validation splits"),
    ],
)
def test_bad_numbers_are_refused_before_the_proxy_loads(tmp_path, capsys, monkeypatch, argv, match):
    import flashstats_hf

    def no_proxy(*args, **kwargs):
        raise AssertionError("the proxy was loaded")

    monkeypatch.setattr(flashstats_hf, "load_model", no_proxy)
    out = tmp_path / "run"
    argv = [str(tmp_path) if a == "DET" else a for a in argv]  # a folder that is no detector
    argv = [str(tmp_path / "missing.json") if a == "MISSING" else a for a in argv]
    assert main([*argv, "--limit", "4", "--device", "cpu", "--out", str(out)]) == 2
    assert match in capsys.readouterr().err and not out.exists()


def test_the_verdict_line_shows_probability_and_threshold_apart():
    from halluprobe.cli._schemas import verdict_line

    assert verdict_line(0.8123, 0.5, 1) == "p(hallucinated) = 0.812  threshold 0.500  -> hallucinated"
    # both round to 0.499 at three decimals: more digits, so the verdict is not a puzzle
    assert verdict_line(0.49912, 0.49937, 0) == "p(hallucinated) = 0.4991  threshold 0.4994  -> supported"
    assert verdict_line(0.5, 0.5, 1).startswith("p(hallucinated) = 0.50000000  threshold 0.50000000")


def test_transfer_help_names_the_packaged_recipe():
    from halluprobe.detectors._default import packaged_path

    doc = json.loads((packaged_path() / "detector.json").read_text())
    if not doc.get("selection", {}).get("probe_weight"):
        pytest.skip("the packaged detector is not an anchored mix")
    recipe = f"O+{doc['feature_set'].removeprefix('G')}@{doc['selection']['probe_weight']:g}"
    sub = build_parser()._subparsers._group_actions[0].choices["transfer"]
    assert f"the packaged detector is {recipe})" in " ".join(sub.format_help().split())
