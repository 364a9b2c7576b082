import json
import subprocess
import sys

import pytest
from halubench_data import write_jsonl
from halujudge import list_templates
from halujudge.cli import JSON_EVALUATE, TEMPLATES, build_parser, main


def test_parser_reads_the_documented_options(tmp_path):
    args = build_parser().parse_args(
        ["evaluate", "--judge", "smollm2", "--dataset", "d.jsonl", "--out", str(tmp_path), "--template",
         "claims", "--limit", "5", "--batch-size", "2", "--device", "cuda"]
    )  # fmt: skip
    assert (args.judge, args.template, args.limit, args.batch_size, args.device) == (
        "smollm2",
        "claims",
        "5",
        2,
        "cuda",
    )
    assert args.out == str(tmp_path) and args.checker is None
    assert set(TEMPLATES) == set(list_templates())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["evaluate", "--dataset", "d", "--out", "o"], "one of the arguments --judge --checker is required"),
        (["evaluate", "--checker", "minicheck", "--dataset", "d", "--out", "o"], "needs --model PATH"),
        (
            ["evaluate", "--checker", "hhem", "--model", "m", "--dataset", "d", "--out", "o"],
            "needs --foundation",
        ),
        (
            ["evaluate", "--judge", "j", "--dataset", "d", "--out", "o", "--limit", "0"],
            "--limit must be at least 2 examples per split (or 'all'), got 0",
        ),
        (
            ["evaluate", "--judge", "j", "--dataset", "d", "--out", "o", "--limit", "1"],
            "--limit must be at least 2",
        ),
        (
            ["evaluate", "--judge", "j", "--dataset", "d", "--out", "o", "--limit", "lots"],
            "--limit expects a number of examples per split, 'all' or 'auto', got 'lots'",
        ),
        (["evaluate", "--judge", "j", "--model", "m", "--dataset", "d", "--out", "o"], "--model applies to"),
        (
            [
                "evaluate",
                "--checker",
                "minicheck",
                "--model",
                "m",
                "--foundation",
                "f",
                "--dataset",
                "d",
                "--out",
                "o",
            ],
            "--foundation applies to --checker hhem",
        ),  # fmt: skip
        (
            ["evaluate", "--judge", "j", "--minicheck-claims", "sentences", "--dataset", "d", "--out", "o"],
            "--minicheck-claims applies to --checker minicheck",
        ),
        (
            [
                "evaluate",
                "--checker",
                "minicheck",
                "--model",
                "m",
                "--template",
                "plain",
                "--dataset",
                "d",
                "--out",
                "o",
            ],
            "--template applies to --judge",
        ),  # fmt: skip
        (
            [
                "evaluate",
                "--judge",
                "j",
                "--template",
                "plain",
                "--select-on",
                "x",
                "--dataset",
                "d",
                "--out",
                "o",
            ],
            "--select-on applies to --judge with --template auto",
        ),  # fmt: skip
        (
            ["evaluate", "--judge", "./no/such.gguf", "--dataset", "default", "--out", "o"],
            "--judge ./no/such.gguf: no such file or folder",
        ),
        (
            [
                "evaluate",
                "--checker",
                "hhem",
                "--model",
                "/no/such/hhem",
                "--foundation",
                "/no/t5",
                "--dataset",
                "default",
                "--out",
                "o",
            ],
            "--model /no/such/hhem: no such file or folder",
        ),  # fmt: skip
    ],
)
def test_bad_command_lines_are_refused(argv, message, capsys):
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own checks
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_help_does_not_import_torch_or_transformers():
    code = (
        "import sys\nfrom halujudge.cli import main\ntry:\n    main(['evaluate', '--help'])\n"
        "except SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "--judge MODEL" in out and out.strip().endswith("[]")


def test_evaluate_end_to_end_and_resume(tiny_llama, tiny_tokenizer, make_example, tmp_path, capsys):
    model_dir = tmp_path / "tiny-judge"
    tiny_llama.save_pretrained(model_dir)
    tiny_tokenizer.save_pretrained(model_dir)
    labels = [1, 0, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0]
    examples = [make_example(i, y, "validation" if i < 6 else "test") for i, y in enumerate(labels)]
    data = write_jsonl(examples, tmp_path / "toy.jsonl")
    out = tmp_path / "out"
    argv = ["evaluate", "--judge", str(model_dir), "--dataset", str(data), "--out", str(out), "--limit", "5",
            "--n-bootstrap", "100", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    selection = json.loads((out / "selection.json").read_text())
    chosen = selection["template_selection"]["template"]
    assert chosen in list_templates() and set(selection["template_selection"]["aurocs"]) == set(
        list_templates()
    )
    assert f"tiny-judge / {chosen}" in (out / "results.md").read_text() and "F1 [95% CI]" in printed
    scores = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 10 and all(0 <= s["score"] <= 1 for s in scores)  # --limit 5 per split
    cached = (out / "cache.jsonl").read_text().count("\n")
    assert cached == 4 * 5 + 5  # every template on validation, the chosen one on test
    assert main(argv) == 2  # earlier outputs are never mixed with new ones
    assert "pass --overwrite" in capsys.readouterr().err
    argv.append("--overwrite")  # replaces the outputs; the score cache is kept
    assert main(argv) == 0  # a rerun reads everything from the cache
    assert (out / "cache.jsonl").read_text().count("\n") == cached
    assert json.loads((out / "selection.json").read_text()) == selection
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0  # --json: the same results, machine-readable, on stdout alone
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == set(JSON_EVALUATE) and (doc["split"], doc["out"]) == ("test", str(out))
    assert doc["methods"] == {f"{model_dir} / {chosen}": selection["test"]}
    assert doc["template_selection"] == selection["template_selection"]


def test_missing_dataset_is_a_clear_error(tmp_path, capsys):
    assert (
        main(
            [
                "evaluate",
                "--judge",
                "smollm2",
                "--dataset",
                str(tmp_path / "none.jsonl"),
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("labels", "extra", "match"),
    [
        ([1, 0, 1, 1, 1, 1], [], "the test split has 3 hallucinated (1) and 0 supported (0) examples"),
        ([0, 0, 0, 1, 0, 1], [], "the validation split has 0 hallucinated (1) and 3 supported (0) examples"),
        ([], [], "toy.jsonl: the validation split has 0 examples"),
        ([1, 0, 1, 1, 0, 1], ["--select-on", "ONE"], "one.jsonl: the validation split has 0 hallucinated"),
    ],
)
def test_a_split_that_cannot_be_scored_fails_before_the_judge_loads(
    make_example, tmp_path, capsys, monkeypatch, labels, extra, match
):
    from halujudge.judge import LLMJudge

    def no_judge(*args, **kwargs):
        raise AssertionError("the judge was loaded")

    monkeypatch.setattr(LLMJudge, "from_pretrained", no_judge)
    examples = [make_example(i, y, "validation" if i < 3 else "test") for i, y in enumerate(labels)]
    data = write_jsonl(examples, tmp_path / "toy.jsonl")
    one = write_jsonl([make_example(i, 0, "validation") for i in range(3)], tmp_path / "one.jsonl")
    extra = [str(one) if a == "ONE" else a for a in extra]
    out = tmp_path / "out"
    argv = [
        "evaluate",
        "--judge",
        "smollm2",
        "--dataset",
        str(data),
        "--out",
        str(out),
        "--device",
        "cpu",
        *extra,
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_a_judge_that_cannot_load_is_named_by_its_flag(tmp_path, capsys):
    fake = tmp_path / "judge.gguf"
    fake.write_bytes(b"not a gguf file\n")
    out = tmp_path / "out"
    argv = ["evaluate", "--judge", str(fake), "--dataset", "default", "--limit", "4", "--out", str(out)]
    assert main([*argv, "--device", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"halujudge evaluate: error: --judge {fake}: cannot load the model (ValueError: ")
    assert len(err.strip().splitlines()) == 1 and not out.exists()
