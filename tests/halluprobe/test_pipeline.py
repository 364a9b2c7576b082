"""The training pipeline: flags read once into `TrainOptions`, one check at the edge, the stages in order.

The walk test follows the options of a real ``halluprobe train`` (on the tiny character proxy) through
every function that holds them, and counts the modules ("rooms") they pass through.
"""

import argparse
import sys
from pathlib import Path

import pytest
from halluprobe.cli._main import build_parser, main, train_options
from halluprobe.cli._transfer import transfer_options
from halluprobe.pipeline import (
    FIT_STAGES,
    FitStage,
    Report,
    TrainOptions,
    TransferOptions,
    check_options,
    run,
)
from halubench_data import clikit

MAX_ROOMS = 12


def test_flags_become_one_options_object():
    o = train_options(build_parser().parse_args(["train", "--feature-sets", "A7, L9", "--limit", "8"]))
    assert (o.kind, o.datasets, o.feature_sets, o.limit, o.jobs) == (
        "dataset",
        ("default",),
        ("A7", "L9"),
        "8",
        None,
    )
    argv = ["train", "--general", "--dataset", "a.jsonl", "--dataset", "b.jsonl", "--jobs", "2"]
    o = train_options(build_parser().parse_args(argv))
    assert (o.kind, o.datasets, o.feature_sets, o.jobs) == ("general", ("a.jsonl", "b.jsonl"), None, 2)
    argv = ["transfer", "--dataset", "x", "--feature-sets", "none", "--judge", "--held-out", "test"]
    o = transfer_options(build_parser().parse_args(argv))
    assert (o.kind, o.feature_sets, o.transfer.judge, o.transfer.held_out) == ("transfer", (), True, "test")


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"kind": "dataset", "datasets": ("a", "b")}, "several --dataset need --general"),
        ({"kind": "general", "toha": True}, "--toha does not apply with --general"),
        ({"kind": "general", "datasets": ("a",)}, "at least two --dataset sources"),
        ({"feature_sets": ()}, "--feature-sets is empty"),
        ({"batch_size": 0}, "--batch-size must be >= 1"),
        ({"kind": "transfer", "transfer": TransferOptions(n_bootstrap=0)}, "--n-bootstrap must be >= 1"),
        ({"kind": "transfer", "transfer": TransferOptions(held_out="train")}, "--held-out 'train'"),
        ({"token_cv": 3}, "--token-cv applies to the token probe"),
    ],
    ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v)),
)
def test_options_are_checked_once_at_the_edge_with_the_flag_named(tmp_path, changes, match):
    base = {"kind": "dataset", "datasets": ("default",), "out": tmp_path, "feature_sets": ("L9",)}
    o = TrainOptions(**{**base, **changes})
    with pytest.raises(clikit.UsageError, match=match):
        check_options(o)


def test_the_fit_stage_is_a_seam_another_estimator_kind_plugs_into(tmp_path, monkeypatch):
    """A kind that reads no proxy records (as a fine-tuned reader would): its stages run in order."""
    calls = []

    class Fitted:
        def save(self, out: Path) -> dict[str, Path]:
            calls.append("save")
            (out / "reader").mkdir(parents=True)
            return {"reader": out / "reader"}

        def report(self, out, saved):
            calls.append("report")
            return Report("done", {"detectors": {k: str(v) for k, v in saved.items()}})

    def fit(o, inputs, extraction):
        calls.append(("fit", extraction, [ds.name for ds in inputs.datasets]))
        return Fitted()

    monkeypatch.setitem(FIT_STAGES, "toy", FitStage(fit, reads=lambda o: False))
    report = run(TrainOptions("toy", ("default",), tmp_path / "out", ("L9",), limit="8", device="cpu"))
    assert calls == [("fit", None, ["default"]), "save", "report"]
    assert report.doc == {"detectors": {"reader": str(tmp_path / "out" / "reader")}}
    with pytest.raises(clikit.UsageError, match="unknown kind of run 'nosuch'"):
        run(TrainOptions("nosuch", ("default",), tmp_path / "o2", ("L9",)))


def _rooms_of(target_type, fn):
    """Modules of halluprobe whose functions hold an object of ``target_type``, in order of entry."""
    stays: list[str] = []

    def profile(frame, event, arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("halluprobe.") or not any(
            isinstance(v, target_type) for v in frame.f_locals.values()
        ):
            return
        if not stays or stays[-1] != module:
            stays.append(module)

    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, stays


def test_the_train_walk_stays_within_twelve_rooms(char_proxy, tmp_path, capsys):
    argv = ["train", "--limit", "8", "--device", "cpu", "--out", str(tmp_path), "--feature-sets", "L9",
            "--no-published"]  # fmt: skip
    code, stays = _rooms_of((argparse.Namespace, TrainOptions), lambda: main(argv))
    assert code == 0, capsys.readouterr().err
    rooms = list(dict.fromkeys(stays))
    assert len(rooms) <= MAX_ROOMS, rooms
    # the CLI, the options, the run and its stages: extraction, then the fit stage of the kind
    assert rooms == ["halluprobe.cli._main", "halluprobe.pipeline._options", "halluprobe.pipeline._run",
                     "halluprobe.pipeline._extraction", "halluprobe.pipeline._fit"]  # fmt: skip
    returns = len(stays) - len(rooms)
    assert returns <= len(rooms), stays  # back to the run between stages, no more
