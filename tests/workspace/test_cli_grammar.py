"""One command-line grammar across halluprobe, halujudge and halubench-data, read from their parsers.

The parsers are built without the ML stack, so this module imports no torch.
"""

import argparse

import pytest
from halluprobe.cli import build_parser as probe_parser
from halubench_data import clikit
from halubench_data.cli import build_parser as data_parser, main as data_main
from halubench_data.io import read_jsonl
from halujudge.cli import build_parser as judge_parser

TOOLS = {"halluprobe": probe_parser, "halujudge": judge_parser, "halubench-data": data_parser}


def _commands():
    for tool, build in TOOLS.items():
        parser = build()
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for name, command in sub.choices.items():
            yield f"{tool} {name}", {o: a for a in command._actions for o in a.option_strings}


COMMANDS = dict(_commands())


def _with(flag):
    return {name: opts[flag] for name, opts in COMMANDS.items() if flag in opts}


def test_every_command_that_reads_a_dataset_takes_dataset_spec():
    readers = _with("--dataset")
    assert set(readers) >= {
        "halluprobe train", "halluprobe extract", "halluprobe evaluate", "halluprobe select-a7",
        "halujudge evaluate", "halubench-data build", "halubench-data stats", "halubench-data baselines",
    }  # fmt: skip
    assert {a.metavar for a in readers.values()} == {"SPEC"}


def test_out_is_always_a_folder_and_overwrite_goes_with_it():
    outs = _with("--out")
    assert {a.metavar for a in outs.values()} == {"DIR"} and all("folder" in a.help for a in outs.values())
    # a command whose only output is the feature cache reuses any folder; every other one has --overwrite
    cache_only = {"halluprobe extract", "halluprobe evaluate"}
    assert set(_with("--overwrite")) == set(outs) - cache_only


def test_shared_flags_have_one_default():
    assert {a.default for a in _with("--limit").values()} == {clikit.DEFAULT_LIMIT}
    sizes = {n: a.default for n, a in _with("--batch-size").items()}
    assert set(sizes.values()) <= {clikit.DEFAULT_BATCH_SIZE, None}  # None: predict fills it in
    assert {a.default for a in _with("--device").values()} == {"auto"}


def test_model_means_a_checkers_weights_only():
    assert set(_with("--model")) == {"halujudge evaluate", "halubench-data build"}
    assert _with("--model")["halubench-data build"].help == argparse.SUPPRESS  # the deprecated alias
    assert "--generator" in COMMANDS["halubench-data build"]


def test_a_positional_spec_still_works_with_a_deprecation_line(tmp_path, capsys):
    assert data_main(["stats", "default", "--json"]) == 0
    err = capsys.readouterr().err
    assert "deprecated" in err and "--dataset default" in err
    assert data_main(["stats", "default", "--dataset", "default"]) == 2


def test_build_writes_a_folder_that_dataset_reads_and_overwrite_replaces_it(tmp_path, capsys):
    from halubench_data.files import OUTPUTS_MANIFEST

    out = tmp_path / "data"
    argv = ["build", "--dataset", "default", "--out", str(out), "--n-contexts", "20"]
    assert data_main(argv) == 0 and len(read_jsonl(out / "dataset.jsonl")) == 120
    assert data_main(["stats", "--dataset", str(out)]) == 0  # the folder is a dataset spec
    (out / "old.txt").write_text("mine")  # a file no run wrote
    (out / "dataset.jsonl").write_text("stale")
    capsys.readouterr()
    assert data_main(argv) == 2 and "pass --overwrite" in capsys.readouterr().err
    # --overwrite replaces what the earlier build wrote and keeps the user's own file
    assert data_main([*argv, "--overwrite"]) == 0 and len(read_jsonl(out / "dataset.jsonl")) == 120
    assert sorted(p.name for p in out.iterdir()) == sorted([OUTPUTS_MANIFEST, "dataset.jsonl", "old.txt"])
    assert (out / "old.txt").read_text() == "mine"


@pytest.mark.parametrize("flag", ["--model"])
def test_build_model_is_a_deprecated_alias_of_generator(tmp_path, capsys, flag):
    assert data_main(["build", "--dataset", "default", "--out", str(tmp_path / "o"), flag, "x"]) == 2
    err = capsys.readouterr().err
    assert "--model of halubench-data build is deprecated" in err and "--task and --generator apply" in err
