"""Reader scores that cover only some held-out sources (a GPU run cut short) in the transfer table."""

from __future__ import annotations

import numpy as np
import pytest

from .conftest import toy_examples  # noqa: TID252 (the fixtures' helpers)


def _fake_folds(examples, sources):
    """Scores that follow the labels (with noise) for the held-out ``sources`` only."""
    rng = np.random.default_rng(0)
    folds = {}
    for name in sources:
        scored = [e for e in examples if e.source == name or (e.split == "validation" and e.source != name)]
        folds[name] = {"scores": {e.id: float(e.label + rng.normal(0, 0.7)) for e in scored}}
    return folds


def test_a_missing_fold_leaves_its_cells_empty_and_says_so():
    from halluprobe.evaluation import leave_one_source_out
    from halluprobe.evaluation._transfer import floor_fitter
    from halluprobe.reader._transfer import missing_folds, reader_fitter
    from halubench_data import Dataset

    examples = toy_examples(90)
    sources = list(dict.fromkeys(e.source for e in examples))
    assert len(sources) == 2
    folds = _fake_folds(examples, sources[:1])
    assert missing_folds(folds, sources) == sources[1:]
    table = leave_one_source_out(
        Dataset(tuple(examples), "toy"), fitters=[floor_fitter, reader_fitter(folds)], n_bootstrap=10
    )
    reader_sources = {r.source for r in table.rows if r.method == "reader"}
    assert reader_sources == {sources[0]}  # the fold without scores has no reader row
    assert {r.source for r in table.rows if r.method == "overlap floor"} == set(sources)
    summary = {s.method: s for s in table.summary()}
    assert summary["reader"].sources == 1 and summary["overlap floor"].sources == 2
    md = table.to_markdown()
    assert f"reader on 1 (no {sources[1]})" in md and "Scored on fewer sources than the table (2)" in md
    reader_line = next(line for line in md.splitlines() if line.startswith("| reader |"))
    assert "/1 |" in reader_line and "/2 |" not in reader_line  # counts over its own sources
    assert md.count(" - |") + md.count(" - \n") >= 2  # its cells in the per-source matrix


def test_a_complete_run_has_no_note_and_unknown_folds_are_refused():
    from halluprobe.evaluation import leave_one_source_out
    from halluprobe.evaluation._transfer import floor_fitter
    from halluprobe.reader._transfer import missing_folds, reader_fitter
    from halubench_data import Dataset

    examples = toy_examples(90)
    sources = list(dict.fromkeys(e.source for e in examples))
    folds = _fake_folds(examples, sources)
    assert missing_folds(folds, sources) == []
    table = leave_one_source_out(
        Dataset(tuple(examples), "toy"), fitters=[floor_fitter, reader_fitter(folds)], n_bootstrap=10
    )
    assert "fewer sources" not in table.to_markdown()
    with pytest.raises(ValueError, match="not in the datasets"):
        missing_folds({**folds, "elsewhere": {"scores": {}}}, sources)


def test_cli_transfer_warns_about_the_sources_without_reader_scores(tmp_path, capsys):
    from halluprobe.cli import main
    from halluprobe.reader._transfer import write_fold_scores
    from halubench_data import write_jsonl

    examples = toy_examples(90)
    sources = list(dict.fromkeys(e.source for e in examples))
    specs = []
    for s in sources:
        write_jsonl([e for e in examples if e.source == s], tmp_path / f"{s}.jsonl")
        specs += ["--dataset", str(tmp_path / f"{s}.jsonl")]
    scores = write_fold_scores(tmp_path / "scores.json", _fake_folds(examples, sources[:1]), {})
    argv = ["transfer", *specs, "--feature-sets", "none", "--no-published", "--reader-scores", str(scores),
            "--n-bootstrap", "10", "--device", "cpu", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert f"no reader for held-out {sources[1]}" in printed.err and "cover 1 of 2 sources" in printed.err
    assert "reader on 1" in (tmp_path / "out" / "transfer.md").read_text()
