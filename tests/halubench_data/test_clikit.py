"""The CLI convention shared by the three CLIs (``halubench_data.clikit``)."""

from __future__ import annotations

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
        ("halluprobe.cli", ["predict", "nowhere", "--context", "c", "--answer", "a", "--device", "garbage"]),
        ("halluprobe.cli", ["extract", "--device", "nonsense", "--out", "unused"]),
        ("halujudge.cli", ["evaluate", "--judge", "x", "--dataset", "d", "--out", "o", "--device", "zz"]),
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
        [sys.executable, "-m", "halubench_data.cli", "stats", str(tmp_path / "missing.jsonl")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 2 and run.stdout == "" and "Traceback" not in run.stderr
    assert run.stderr.startswith("halubench-data stats: error: ") and "missing.jsonl" in run.stderr
