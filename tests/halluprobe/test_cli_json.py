"""``--json`` of every halluprobe command with results, run on a tiny character-level proxy (CPU, seconds).

Each document is parsed from stdout alone; step messages must stay on stderr.
"""

import json

from halluprobe.cli import _schemas as schemas, main


def _json(argv, capsys):
    code = main([*argv, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out), out.err


def test_train_evaluate_extract_and_select_print_their_documented_json(char_proxy, tmp_path, capsys):
    run = tmp_path / "run"
    common = ["--limit", "8", "--device", "cpu", "--out", str(run)]
    doc, err = _json(["train", *common, "--feature-sets", "A7,L9"], capsys)
    assert set(doc) == set(schemas.TRAIN) and doc["report"] == str(run / "report.md")
    assert doc["results"] == json.loads((run / "results.json").read_text())
    methods = doc["results"]["datasets"]["default"]["methods"]
    assert {"A7", "L9", "LookbackLens", "text-only tfidf"} <= set(methods)
    assert all(0 <= m["f1"] <= 1 and m["n"] == 8 for m in methods.values())
    assert set(doc["detectors"]) == {"A7", "L9"} and "ranking induction heads" in err

    doc, _ = _json(["evaluate", doc["detectors"]["L9"], "--limit", "8", "--device", "cpu",
                    "--out", str(run)], capsys)  # fmt: skip
    assert set(doc) == set(schemas.EVALUATE) and (doc["dataset"], doc["split"]) == ("default", "test")
    ((name, res),) = doc["methods"].items()
    assert name == "L9" and res["n"] == 8 and res["f1_ci"][0] <= res["f1"] <= res["f1_ci"][1]
    assert res["auroc"] == methods["L9"]["auroc"]  # the same records, from the run's cache
    assert doc["floors"]["overlap floor"]["auroc"] == methods["overlap floor"]["auroc"]  # the same test split
    assert doc["best_floor"]["auroc"] == max(f["auroc"] for f in doc["floors"].values())

    doc, _ = _json(["predict", doc["detector"], "--context", "Ada lives in Lyon.", "--answer", "In Rome.",
                    "--tokens", "--device", "cpu"], capsys)  # fmt: skip
    assert set(doc) == set(schemas.PREDICT) - {"error"} and doc["id"] is None and doc["label"] in (0, 1)
    assert [t["token"] for t in doc["tokens"]] == list("In Rome.")  # one character per token

    doc, _ = _json(["extract", *common], capsys)
    assert doc == {"cache": str(run / "cache"), "records": 24,
                   "splits": {"train": 8, "validation": 8, "test": 8}}  # fmt: skip

    doc, _ = _json(["select-l9", "--limit", "16", "--device", "cpu", "--out", str(run),
                    "--n-features", "2", "--overwrite"], capsys)  # fmt: skip
    assert not (run / "report.md").exists() and (run / "cache").is_dir()  # train's outputs gone, cache kept
    assert set(doc) == set(schemas.SELECT) and doc["block"] == "L9" and len(doc["features"]) == 2
    saved = json.loads((run / "l9.json").read_text())
    assert (saved["features"], saved["provenance"]) == (doc["features"], doc["provenance"])
    assert doc["provenance"]["n_examples"] == 16 and doc["selection"] == str(run / "l9.json")


def test_human_output_is_unchanged_without_json(char_proxy, tmp_path, capsys):
    argv = ["train", "--limit", "8", "--device", "cpu", "--out", str(tmp_path), "--feature-sets", "A7",
            "--no-published"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "| A7 |" in out.out and f"report: {tmp_path / 'report.md'}" in out.out
    assert "ranking induction heads" in out.err and "ranking" not in out.out


def test_train_overwrite_removes_only_what_a_train_wrote(char_proxy, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--limit", "8", "--device", "cpu", "--out", str(run), "--feature-sets", "A7",
            "--no-published"]  # fmt: skip
    assert main(argv) == 0
    (run / "mynotes.txt").write_text("my notes")
    (run / "detectors" / "mine").mkdir()
    (run / "detectors" / "mine" / "keep.txt").write_text("my detector notes")
    capsys.readouterr()
    assert main(argv) == 2  # refused: names the earlier outputs apart from the user's files
    err = capsys.readouterr().err
    assert "the outputs of an earlier run (" in err and "files that no run of these tools wrote" in err
    assert "detectors/mine/keep.txt, mynotes.txt; --overwrite keeps them" in err
    assert main([*argv, "--overwrite"]) == 0
    assert (run / "mynotes.txt").read_text() == "my notes"
    assert (run / "detectors" / "mine" / "keep.txt").read_text() == "my detector notes"
    assert (run / "report.md").is_file() and (run / "detectors" / "A7" / "detector.json").is_file()
