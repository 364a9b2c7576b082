"""The CLI convention shared by the three CLIs (``halubench_data.clikit``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from halubench_data import clikit

CLIS = ("halubench_data.cli", "halujudge.cli", "halluprobe.cli")


def _parser():
    parser = clikit.make_parser("demo", "a demo", dist="halubench-data")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("go")
    p.add_argument("--n", type=int, default=1)
    clikit.add_device_arg(p)
    return parser


def _commands(behaviour):
    def go(args):
        clikit.status("working")
        return behaviour(args)

    return {"go": go}


def _raise(exc):
    def fn(args):
        raise exc

    return fn


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (clikit.UsageError("--n must be positive"), 2),
        (ValueError("data.jsonl:3: field 'label': unknown label 7"), 2),
        (FileNotFoundError("no such file x.jsonl"), 2),
        (PermissionError("read-only: out"), 2),
        (RuntimeError("kernel crashed\nsecond line"), 1),
    ],
)
def test_exit_status_and_one_line_error(exc, code, capsys):
    assert clikit.run(_parser(), _commands(_raise(exc)), ["go"]) == code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines[0] == "working" and len(lines) == 2 and lines[1].startswith("demo go: error: ")
    assert "Traceback" not in err and clikit.one_line(exc) in lines[1]


def test_ctrl_c_ends_with_130_and_one_line(capsys):
    assert clikit.run(_parser(), _commands(_raise(KeyboardInterrupt())), ["go", "--quiet"]) == 130
    out, err = capsys.readouterr()
    assert out == "" and err == "demo go: interrupted\n"


def test_debug_prints_the_traceback_with_the_same_status(capsys):
    assert clikit.run(_parser(), _commands(_raise(ValueError("bad"))), ["--debug", "go"]) == 2
    assert "Traceback" in capsys.readouterr().err
    assert clikit.run(_parser(), _commands(_raise(ValueError("bad"))), ["go", "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_quiet_silences_status_and_success_is_zero(capsys):
    assert clikit.run(_parser(), _commands(lambda a: print("result")), ["go", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert out == "result\n" and err == ""
    assert clikit.run(_parser(), _commands(lambda a: None), ["--quiet", "go"]) == 0
    assert capsys.readouterr().err == "" and not clikit.is_quiet()


def test_argparse_errors_are_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as ex:
        clikit.run(_parser(), _commands(lambda a: 0), ["go", "--n", "x"])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and len(err.strip().splitlines()) == 1 and "--n" in err


def test_an_unknown_option_is_named_with_its_command(capsys):
    with pytest.raises(SystemExit) as ex:
        clikit.run(_parser(), _commands(lambda a: 0), ["go", "--bogus", "1"])
    err = capsys.readouterr().err
    assert (
        ex.value.code == 2
        and err == "demo go: error: unrecognized arguments: --bogus 1 (see demo go --help)\n"
    )


@pytest.mark.parametrize("name", ["garbage", "cuda:x", "tpu", "meta"])
def test_unknown_device_is_a_usage_error(name):
    with pytest.raises(clikit.UsageError, match="--device"):
        clikit.resolve_device(name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_gpu_is_a_usage_error():
    with pytest.raises(clikit.UsageError, match="no CUDA device"):
        clikit.resolve_device("cuda")
    assert clikit.resolve_device("auto") == clikit.resolve_device(None) == "cpu"


@pytest.mark.parametrize("module", CLIS)
def test_every_cli_has_version_quiet_debug_and_device_default(module):
    mod = __import__(module, fromlist=["build_parser"])
    parser = mod.build_parser()
    with pytest.raises(SystemExit) as ex:
        parser.parse_args(["--version"])
    assert ex.value.code == 0
    assert isinstance(parser, clikit.ConventionParser)
    devices = [
        a.default
        for sp in parser._subparsers._group_actions[0].choices.values()  # noqa: SLF001
        for a in sp._actions  # noqa: SLF001
        if "--device" in a.option_strings
    ]
    assert set(devices) <= {"auto"}


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("halluprobe.cli", ["extract", "--device", "cpu"]),
        ("halujudge.cli", ["evaluate", "--judge", "smollm2", "--device", "cpu"]),
    ],
)
def test_limit_reads_the_same_in_every_cli(module, argv, tmp_path, capsys):
    main = __import__(module, fromlist=["main"]).main
    argv = [*argv, "--out", str(tmp_path / "out"), "--dataset", str(tmp_path / "missing.jsonl")]
    for limit, match in [
        ("all", "missing.jsonl': no such file"),  # accepted: the next check is the dataset's
        ("1", "--limit must be at least 2 examples per split (or 'all'), got 1"),
        ("lots", "--limit expects a number of examples per split, 'all' or 'auto', got 'lots'"),
    ]:
        assert main([*argv, "--limit", limit]) == 2
        err = capsys.readouterr().err
        assert match in err and len(err.splitlines()) == 1, (limit, err)


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("halluprobe.cli", ["predict", "nowhere", "--context", "c", "--answer", "a", "--device", "garbage"]),
        ("halluprobe.cli", ["extract", "--device", "nonsense", "--out", "unused"]),
        (
            "halujudge.cli",
            ["evaluate", "--judge", "smollm2", "--dataset", "d", "--out", "o", "--device", "zz"],
        ),
    ],
)
def test_cli_device_errors_exit_2_in_one_line(module, argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main = __import__(module, fromlist=["main"]).main
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and "--device" in err and "Traceback" not in err
    assert out == "" and list(tmp_path.iterdir()) == []


def test_a_real_process_exits_2_without_a_traceback(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "halubench_data.cli", "stats", "--dataset", str(tmp_path / "missing.jsonl")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 2 and run.stdout == "" and "Traceback" not in run.stderr
    assert run.stderr.startswith("halubench-data stats: error: ") and "missing.jsonl" in run.stderr


def _json_parser(fields, lines=False):
    parser = _parser()
    go = parser._subparsers._group_actions[0].choices["go"]  # noqa: SLF001
    clikit.add_json_arg(go, fields, lines=lines)
    return parser


def test_json_prints_one_document_and_moves_other_output_to_stderr(capsys):
    def go(args):
        print("a stray line from some library")
        clikit.status("step")
        clikit.emit("| a table |", {"auroc": float("nan"), "ci": (0.25, 0.75), "path": tmp})

    from pathlib import Path

    tmp = Path("out")
    parser = _json_parser({"auroc": "AUROC", "ci": "its interval", "path": "where"})
    assert clikit.run(parser, {"go": go}, ["go", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"auroc": None, "ci": [0.25, 0.75], "path": "out"}
    assert "a stray line" in err and "step" in err
    assert clikit.run(parser, {"go": go}, ["go"]) == 0  # without --json: the table, stdout as usual
    out, err = capsys.readouterr()
    assert out == "a stray line from some library\n| a table |\n" and err == "step\n"
    assert not clikit.wants_json()


def test_json_output_must_match_the_documented_schema(capsys):
    parser = _json_parser({"f1": "F1", "auroc": "AUROC"})
    assert clikit.run(parser, {"go": lambda a: clikit.emit("", {"f1": 0.5})}, ["go", "--json"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "missing ['auroc']" in err
    lines = _json_parser({"event": "kind", "p": "probability", "label": "final label"}, lines=True)

    def stream(args):
        clikit.emit_json({"event": "tokens", "p": 0.2})
        clikit.emit_json({"event": "done", "p": 0.3, "label": 0})

    assert clikit.run(lines, {"go": stream}, ["go", "--json"]) == 0
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d["event"] for d in docs] == ["tokens", "done"]  # one object per line
    bad = {"go": lambda a: clikit.emit_json({"event": "x", "surprise": 1})}
    assert clikit.run(lines, bad, ["go", "--json"]) == 1
    assert "undocumented ['surprise']" in capsys.readouterr().err


@pytest.mark.parametrize("module", CLIS)
def test_every_command_of_every_cli_offers_documented_json(module):
    parser = __import__(module, fromlist=["build_parser"]).build_parser()
    for name, sub in parser._subparsers._group_actions[0].choices.items():  # noqa: SLF001
        schema = sub.get_default("json_schema")
        assert isinstance(schema, clikit.JsonSchema), f"{module} {name} has no --json"
        assert schema.fields and all(len(text) > 5 for text in schema.fields.values()), (module, name)
        assert sub.parse_args(_required_args(sub) + ["--json"]).json is True


def _required_args(sub):
    """Placeholder values for a subcommand's required positionals and options."""
    argv = []
    for action in sub._actions:  # noqa: SLF001
        if not action.option_strings and action.nargs is None:
            argv.append("x")
        elif action.required and action.option_strings:
            argv += [action.option_strings[0], "x"]
    for group in sub._mutually_exclusive_groups:  # noqa: SLF001
        if group.required:
            argv += [group._group_actions[0].option_strings[0], "x"]  # noqa: SLF001
    return argv


def test_no_progress_everywhere_keeps_step_messages(capsys):
    seen = []

    def go(args):
        seen.append(clikit.show_progress())
        clikit.status("step")

    for argv in (["go"], ["go", "--no-progress"], ["--no-progress", "go"], ["go", "--quiet"]):
        assert clikit.run(_parser(), {"go": go}, argv) == 0
    assert seen == [True, False, False, False] and capsys.readouterr().err == "step\n" * 3
    for module in CLIS:
        parser = __import__(module, fromlist=["build_parser"]).build_parser()
        for name, sub in parser._subparsers._group_actions[0].choices.items():  # noqa: SLF001
            assert sub.parse_args(_required_args(sub) + ["--no-progress"]).no_progress, (module, name)


@pytest.mark.parametrize("flags", [[], ["--no-progress"], ["--quiet"]])
def test_a_librarys_own_progress_bar_follows_quiet_and_no_progress(capsys, flags):
    from tqdm.auto import tqdm

    def go(args):  # as Transformers converts a GGUF file: a bar we cannot switch off from outside
        clikit.status("loading")
        for _ in tqdm(range(3), desc="Converting tensors"):
            pass
        for _ in tqdm(range(2), desc="inner", leave=False):
            pass
        print("a warning", file=sys.stderr)

    assert clikit.run(_parser(), {"go": go}, ["go", *flags]) == 0
    err = capsys.readouterr().err
    assert ("Converting tensors" in err) == (not flags) and ("inner" in err) == (not flags)
    steps = "" if "--quiet" in flags else "loading\n"
    assert err.endswith("a warning\n") and (err == steps + "a warning\n") == bool(flags)


PIPE_SCRIPT = """
import sys
from halubench_data import clikit
parser = clikit.make_parser("demo", "d", dist="halubench-data")
sub = parser.add_subparsers(dest="command", required=True)
sub.add_parser("lines")
sub.add_parser("other")
def lines(args):
    for i in range(200_000):
        print(f"line {i}")
def other(args):
    raise BrokenPipeError(32, "a broken pipe that is not stdout")
sys.exit(clikit.run(parser, {"lines": lines, "other": other}))
"""


def _read_one_line_then_close(argv):
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        first = proc.stdout.readline()
        proc.stdout.close()  # like `| head -1`
        err = proc.stderr.read().decode()
        return first.decode(), proc.wait(), err


@pytest.mark.parametrize(
    "argv",
    [["-c", PIPE_SCRIPT, "lines"], ["-m", "halubench_data.cli", "stats", "--dataset", "default"],
     ["-m", "halubench_data.cli", "stats", "--dataset", "default", "--json"]],
)  # fmt: skip
def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(argv):
    first, code, err = _read_one_line_then_close([sys.executable, *argv])
    assert first and err == "" and code in (0, clikit.EXIT_BROKEN_PIPE)
    if argv[-1] == "lines":  # more output than a pipe holds: the write must fail
        assert code == clikit.EXIT_BROKEN_PIPE


def test_a_broken_pipe_elsewhere_is_still_a_failure():
    run = subprocess.run([sys.executable, "-c", PIPE_SCRIPT, "other"], capture_output=True, text=True)
    assert run.returncode == 1 and "BrokenPipeError" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("module", CLIS)
def test_every_option_of_every_command_has_help_text(module):
    parser = __import__(module, fromlist=["build_parser"]).build_parser()
    for name, sub in parser._subparsers._group_actions[0].choices.items():  # noqa: SLF001
        bare = [a.option_strings or a.dest for a in sub._actions if not a.help]  # noqa: SLF001
        assert not bare, f"{module} {name}: no help for {bare}"


def test_no_progress_turns_off_transformers_bars_too():
    from transformers.utils import logging as hf_logging

    seen = []

    def go(args):
        clikit.quiet_transformers()
        seen.append(hf_logging.is_progress_bar_enabled())

    hf_logging.enable_progress_bar()  # an earlier CLI test in the process may have turned them off
    try:
        assert clikit.run(_parser(), {"go": go}, ["go"]) == 0
        assert clikit.run(_parser(), {"go": go}, ["go", "--no-progress"]) == 0
    finally:
        hf_logging.enable_progress_bar()
    assert seen == [True, False]


def test_quiet_silences_the_hub_clients_retry_warnings_too():
    import logging

    from huggingface_hub.utils import logging as hub_logging

    hub = hub_logging.get_logger("huggingface_hub")
    before = hub.level
    hub.setLevel(logging.WARNING)  # an earlier --quiet test in the process may have raised it
    try:
        assert (
            clikit.run(_parser(), {"go": lambda a: clikit.quiet_transformers()}, ["go", "--no-progress"]) == 0
        )
        assert hub.getEffectiveLevel() == logging.WARNING  # --no-progress keeps warnings
        assert clikit.run(_parser(), {"go": lambda a: clikit.quiet_transformers()}, ["go", "--quiet"]) == 0
        assert hub.getEffectiveLevel() == logging.ERROR
    finally:
        hub.setLevel(before)


def test_deterministic_kernels_turns_on_torchs_flag_for_cuda_only(monkeypatch):
    """A CUDA run of a CLI pins the kernels' configs through torch's flag; CPU runs and --autotune do not."""
    import argparse
    import os

    flag = torch.are_deterministic_algorithms_enabled()
    before = flag, torch.is_deterministic_algorithms_warn_only_enabled()
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    torch.use_deterministic_algorithms(False)
    try:
        assert not clikit.deterministic_kernels("cpu") and not torch.are_deterministic_algorithms_enabled()
        assert not clikit.deterministic_kernels("cuda:0", autotune=True)
        assert not torch.are_deterministic_algorithms_enabled()
        assert clikit.deterministic_kernels("cuda:1")  # the flag only: nothing touches a device here
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()  # ops without a deterministic form warn
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    p = argparse.ArgumentParser()
    clikit.add_autotune_arg(p)
    assert not p.parse_args([]).autotune and p.parse_args(["--autotune"]).autotune
