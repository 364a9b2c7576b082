"""Every bad input to the three CLIs: exit 2, one line naming the argument or file:line, nothing left behind.

The audit's classes (issue #20): devices, proxies, output folders, dataset specs, detector paths,
layer ranges, feature sets, JSONL files (malformed, wrong types, empty answers, non-UTF-8, duplicate
ids), one-class splits and bad limits. Each case runs the CLI's ``main`` in-process (no model is loaded:
each error is found before), so the whole table is fast.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest
import torch
from halluprobe.cli._main import main as probe_main, parse_layers
from halubench_data.cli import main as data_main
from halujudge.cli import main as judge_main

GOOD = {"id": "a", "source": "s", "context": "Ada lives in Lyon.", "question": "Where?", "answer": "Lyon",
        "label": 0, "group": "g"}  # fmt: skip


def _jsonl(tmp: Path, name: str, lines: list) -> str:
    path = tmp / name
    path.write_bytes(b"".join(x if isinstance(x, bytes) else (json.dumps(x) + "\n").encode() for x in lines))
    return str(path)


def _files(tmp: Path) -> dict[str, str]:
    (tmp / "afile").write_text("x")
    (tmp / "dir.jsonl").mkdir()
    return {
        "out": str(tmp / "out"),  # must not exist afterwards
        "file": str(tmp / "afile"),
        "dirjsonl": str(tmp / "dir.jsonl"),
        "malformed": _jsonl(tmp, "malformed.jsonl", [GOOD, b'{"id": "b", oops\n']),
        "wrongtype": _jsonl(tmp, "wrongtype.jsonl", [{**GOOD, "label": "yes"}]),
        "emptyanswer": _jsonl(tmp, "emptyanswer.jsonl", [GOOD, {**GOOD, "id": "b", "answer": "  "}]),
        "nonutf8": _jsonl(tmp, "nonutf8.jsonl", [GOOD, b'{"id": "\xff\xfe"}\n']),
        "duplicate": _jsonl(tmp, "duplicate.jsonl", [GOOD, GOOD]),
        "oneclass": _jsonl(
            tmp, "oneclass.jsonl", [{**GOOD, "id": str(i), "group": str(i)} for i in range(9)]
        ),
    }


P, D, J = probe_main, data_main, judge_main
CASES = [
    (P, ["extract", "--device", "garbage", "--out", "{out}"], "--device"),
    (P, ["extract", "--device", "cuda:x", "--out", "{out}"], "--device"),
    (P, ["train", "--device", "cpu", "--proxy", "./no/such/proxy", "--out", "{out}"], "--proxy"),
    (P, ["extract", "--device", "cpu", "--out", "{file}"], "--out"),
    (P, ["extract", "--device", "cpu", "--out", "{file}/sub"], "--out"),
    (P, ["extract", "--device", "cpu", "--dataset", "{dirjsonl}", "--out", "{out}"], "--dataset"),
    (P, ["extract", "--device", "cpu", "--dataset", "claims:{dirjsonl}", "--out", "{out}"], "--dataset"),
    (P, ["extract", "--device", "cpu", "--dataset", "wice:{out}/none", "--out", "{out}"], "--dataset"),
    (P, ["extract", "--device", "cpu", "--layers", "0-100000000", "--out", "{out}"], "--layers"),
    (P, ["extract", "--device", "cpu", "--layers", "3-1", "--out", "{out}"], "--layers"),
    (P, ["extract", "--device", "cpu", "--layers", "a-b", "--out", "{out}"], "--layers"),
    (P, ["train", "--device", "cpu", "--feature-sets", ",", "--out", "{out}"], "--feature-sets"),
    (P, ["train", "--device", "cpu", "--feature-sets", "A9", "--out", "{out}"], "A9"),
    (P, ["extract", "--device", "cpu", "--limit", "0", "--out", "{out}"], "--limit"),
    (P, ["extract", "--device", "cpu", "--limit", "lots", "--out", "{out}"], "--limit"),
    (P, ["extract", "--device", "cpu", "--dataset", "{malformed}", "--out", "{out}"], "malformed.jsonl:2"),
    (P, ["extract", "--device", "cpu", "--dataset", "{nonutf8}", "--out", "{out}"], "nonutf8.jsonl:2"),
    (P, ["train", "--device", "cpu", "--dataset", "{wrongtype}", "--out", "{out}"], "error: --dataset "),
    (P, ["evaluate", "{file}", "--device", "cpu", "--out", "{out}"], "is a file"),
    (P, ["evaluate", "{out}/none", "--device", "cpu", "--layers", "0-3", "--out", "{out}"], "--layers"),
    (P, ["predict", "{file}", "--context", "c", "--answer", "a", "--device", "cpu"], "is a file"),
    (D, ["stats", "--dataset", "{malformed}"], "malformed.jsonl:2"),
    (D, ["stats", "--dataset", "{wrongtype}"], "wrongtype.jsonl:1: field 'label'"),
    (D, ["stats", "--dataset", "{emptyanswer}"], "emptyanswer.jsonl:2: field 'answer'"),
    (D, ["stats", "--dataset", "{nonutf8}"], "nonutf8.jsonl:2"),
    (D, ["stats", "--dataset", "{duplicate}"], "duplicate.jsonl:2: field 'id'"),
    (D, ["stats", "--dataset", "{dirjsonl}"], "dir.jsonl"),
    (D, ["baselines", "--dataset", "{oneclass}", "--n-bootstrap", "10"], "both labels"),
    (D, ["baselines", "--dataset", "{oneclass}", "--n-bootstrap", "0"], "--n-bootstrap"),
    (D, ["build", "--dataset", "default", "--out", "{out}", "--n-contexts", "0"], "--n-contexts"),
    (D, ["build", "--dataset", "default", "--out", "{file}"], "--out"),
    (D, ["build", "--dataset", "default", "--out", "."], "--out . holds "),
    (D, ["build", "--dataset", "wice", "--out", "{out}"], "NAME:PATH"),
    (D, ["build", "--dataset", "wice:{out}/none", "--out", "{out}"], "does not exist"),
    (
        J,
        ["evaluate", "--judge", "smollm2", "--dataset", "{malformed}", "--out", "{out}", "--device", "cpu"],
        "malformed.jsonl:2",
    ),  # fmt: skip
    (J, ["evaluate", "--judge", "smollm2", "--dataset", "d", "--out", "{file}", "--device", "cpu"], "--out"),
    (J, ["evaluate", "--judge", "smollm2", "--dataset", "d", "--out", "{out}", "--limit", "0"], "--limit"),
    (
        J,
        ["evaluate", "--judge", "smollm2", "--dataset", "{dirjsonl}", "--out", "{out}", "--device", "cpu"],
        "dir.jsonl",
    ),  # fmt: skip
]


@pytest.mark.parametrize(
    ("main", "argv", "names"),
    CASES,
    ids=[f"{m.__module__.split('.')[0]}-{' '.join(a[:3])}" for m, a, _ in CASES],
)
def test_bad_input_exits_2_with_one_named_line_and_leaves_nothing(
    main, argv, names, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    files = _files(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    try:
        code = main([a.format(**files) for a in argv])
    except SystemExit as exc:  # argparse's own checks
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and names in err and "Traceback" not in err, err
    assert out == ""
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("main", [probe_main, judge_main], ids=["halluprobe", "halujudge"])
def test_cuda_without_a_gpu(main, tmp_path, capsys):
    out = str(tmp_path / "o")
    argv = (
        ["extract", "--out", out]
        if main is probe_main
        else ["evaluate", "--judge", "smollm2", "--dataset", "d", "--out", out]
    )
    assert main([*argv, "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no CUDA device" in err and not (tmp_path / "o").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_read_only_out_folder(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert probe_main(["extract", "--device", "cpu", "--out", str(ro / "run")]) == 2
        assert "not writable" in capsys.readouterr().err
    finally:
        ro.chmod(0o700)


def test_layers_are_checked_against_the_model():
    with pytest.raises(ValueError, match="the proxy has 30 layers"):
        parse_layers("0-40", 30)
    assert parse_layers("0-2,29", 30) == (0, 1, 2, 29)


@pytest.mark.slow
def test_proxy_errors_need_the_model_loader(tmp_path, capsys, monkeypatch):
    """A hub id without network and a folder of pickle weights: exit 2 naming --proxy."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pick = tmp_path / "pickled"
    pick.mkdir()
    (pick / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 32,
        "architectures": ["LlamaForCausalLM"],
    }))  # fmt: skip
    evil = argparse.Namespace(code="anything a pickle may run")  # not on torch's weights-only list
    torch.save({"model.embed_tokens.weight": torch.zeros(32, 8), "evil": evil}, pick / "pytorch_model.bin")
    for proxy in ("no-such-org/no-such-model", str(pick)):
        argv = [
            "extract",
            "--quiet",
            "--device",
            "cpu",
            "--limit",
            "2",
            "--proxy",
            proxy,
            "--out",
            str(tmp_path / "o"),
        ]
        assert probe_main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "--proxy" in err and "Traceback" not in err
        assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_judge_that_cannot_load_leaves_no_output_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "o"
    argv = ["evaluate", "--quiet", "--judge", str(tmp_path / "nope"), "--dataset", "default", "--limit", "2",
            "--device", "cpu", "--out", str(out)]  # fmt: skip
    assert judge_main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nope" in err and not out.exists()
