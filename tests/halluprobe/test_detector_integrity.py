"""A loaded detector is exactly what was saved, or a named refusal (issues #20 and #21).

Before: metadata edits (threshold, intercept) loaded with exit 0, NaN weights predicted ``p = nan ->
supported``, a detector file linked to /dev/zero or a FIFO hung, and a shape mismatch surfaced as a
NumPy gufunc error.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading

import numpy as np
import pytest
from halluprobe.cli import main
from halluprobe.detectors import Detector
from halluprobe.detectors._detector_file import document_digest
from halluprobe.features import reduce_forward
from halluprobe.training import fit_blocks, make_blocks
from safetensors.numpy import load_file, save_file


def _records(factory, n, seed0, **kw):
    recs = []
    for s in range(n):
        fs = factory(answer_lens=(4, 3, 5), prompt_lens=(5, 6, 4), seed=seed0 + s, **kw)
        recs += reduce_forward(fs, [f"b{seed0 + s}-{i}" for i in range(3)])
    return recs


_SAVED: dict = {}


@pytest.fixture
def saved(forward_factory, tmp_path_factory):
    """One fitted and saved detector for the whole module (fitting is the slow part)."""
    if not _SAVED:
        train, val = _records(forward_factory, 8, 0), _records(forward_factory, 4, 100)
        rng = np.random.default_rng(0)
        y_tr, y_va = rng.permutation(np.arange(24) % 2), rng.permutation(np.arange(12) % 2)
        fit = fit_blocks(make_blocks("ALL", heads=[0, 4], k=2), "ALL", train, y_tr, val, y_va)
        _SAVED["v"] = (
            Detector.from_probe(fit, hidden_layers=(1,)).save(tmp_path_factory.mktemp("det") / "d"),
            val,
        )
    return _SAVED["v"]


@pytest.fixture
def det(saved, tmp_path):
    src, val = saved
    dst = tmp_path / "d"
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst, val


def _edit(path, doc_change=None, tensor_change=None, reseal=True):
    """Edit a saved detector; with ``reseal`` the hashes are recomputed (a deliberate edit)."""
    doc = json.loads((path / "detector.json").read_text())
    if tensor_change is not None:
        tensors = load_file(str(path / "detector.safetensors"))
        tensor_change(tensors)
        save_file(tensors, str(path / "detector.safetensors"))
        doc["tensors_sha256"] = hashlib.sha256((path / "detector.safetensors").read_bytes()).hexdigest()
    if doc_change is not None:
        doc_change(doc)
    if reseal:
        doc["integrity"] = document_digest(doc)
    (path / "detector.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(threshold=0.01),
        lambda d: d.update(intercept=d["intercept"] + 50),
        lambda d: d.update(layers=[0, 1]),
        lambda d: d["blocks"][0].update(heads=[1]),
    ],
    ids=["threshold", "intercept", "layers", "block-config"],
)
def test_any_metadata_edit_is_refused(det, change):
    path, _ = det
    _edit(path, doc_change=change, reseal=False)
    with pytest.raises(ValueError, match="integrity hash"):
        Detector.load(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(threshold="0.5"), "'threshold' must be a finite number"),
        (lambda d: d.update(threshold=1.5), "'threshold' must lie in"),
        (lambda d: d.update(intercept=None), "'intercept' must be a finite number"),
        (lambda d: d.update(hidden_layers="1"), "'hidden_layers' must be a list"),
        (lambda d: d.update(blocks=[]), "'blocks' must be a non-empty list"),
    ],
)
def test_resealed_bad_fields_are_named(det, change, message):
    path, _ = det
    _edit(path, doc_change=change)
    with pytest.raises(ValueError, match=message):
        Detector.load(path)


def _block(name, change):
    def edit(doc):
        (cfg,) = (b for b in doc["blocks"] if b["name"] == name)
        change(cfg)

    return edit


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            _block("A7", lambda b: b.update(heads=[-1])),
            r"'blocks\[0\]' \('A7'\): A7 heads must be an integer >= 0",
        ),
        (_block("A7", lambda b: b.update(heads=[0, 1.5])), "A7 heads must be an integer"),
        (lambda d: d.update(feature_set="L9"), "field 'feature_set' is 'L9' .* but field 'blocks' holds"),
        (lambda d: d.update(feature_set="A7L9"), "field 'feature_set' is 'A7L9'"),
        (lambda d: d.update(feature_set="B12"), "field 'feature_set': feature set 'B12' is not"),
        (lambda d: d.update(selection={"K": "sixteen"}), "field 'selection.K' must be a finite number"),
        (lambda d: d.update(selection={"K": 16}), "selection' has K = 16 but the blocks imply 2"),
        (lambda d: d.update(selection={"k": 3}), "selection' has k = 3 but the blocks imply 2"),
        (
            _block("A64", lambda b: b.update(k="2")),
            r"A64 sink count k must be an integer in 1\.\.\d+, got '2'",
        ),
        (_block("A64", lambda b: b.update(components=0.5)), "A64 components must be an integer >= 1"),
        (
            _block("H64", lambda b: b.update(layer=1)),
            "H64 field 'layer' is 1 but field 'hidden_layers' keeps 1",
        ),
        (_block("H64", lambda b: b.update(layer=True)), "H64 layer must be an integer"),
        (
            _block("L9", lambda b: b.update(features=["attention.max"])),
            "L9 needs features from L9_CANDIDATES",
        ),
    ],
    ids=[
        "negative-head",
        "float-head",
        "L9-on-A7",
        "blocks-missing",
        "unknown-set",
        "K-string",
        "K-mismatch",
        "k-mismatch",
        "k-string",
        "components-float",
        "H64-layer-range",
        "H64-layer-bool",
        "L9-feature",
    ],
)
def test_resealed_fields_that_make_no_sense_are_named(det, change, message):
    path, _ = det
    _edit(path, doc_change=change)
    with pytest.raises(ValueError, match=message) as err:
        Detector.load(path)
    assert str(path / "detector.json") in str(err.value)


def test_nan_threshold_cannot_even_be_written_as_json(det):
    path, _ = det
    doc = json.loads((path / "detector.json").read_text())
    doc["threshold"] = float("nan")
    (path / "detector.json").write_text(json.dumps(doc))  # NaN in the JSON: the hash cannot match
    with pytest.raises(ValueError, match="integrity hash|finite"):
        Detector.load(path)


def _set(key, fn):
    def change(t):
        t[key] = fn(t[key])

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_set("coef", lambda a: np.full_like(a, np.nan)), "'coef' must hold finite floats"),
        (_set("scaler.scale", np.zeros_like), "'scaler.scale' has zero"),
        (_set("coef", lambda a: a[:-1].copy()), "'coef' has shape"),
        (_set("block1.components", lambda a: np.where(a > 0, np.inf, a)), "non-finite"),
        (_set("block2.scale", np.zeros_like), "zero or negative scale"),
        (_set("block1.mean", lambda a: a[:-2].copy()), "shape"),
    ],
    ids=["nan-coef", "zero-scaler", "short-coef", "inf-components", "zero-block-scale", "short-mean"],
)
def test_bad_arrays_are_refused_even_with_valid_hashes(det, change, message):
    path, _ = det
    _edit(path, tensor_change=change)
    with pytest.raises(ValueError, match=message):
        Detector.load(path)


def test_cli_refuses_a_tampered_detector_in_one_line(det, capsys):
    path, _ = det
    _edit(path, tensor_change=_set("coef", lambda a: np.full_like(a, np.nan)))
    code = main(["predict", str(path), "--context", "c", "--answer", "a", "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "coef" in err


def test_links_fifos_and_files_are_refused_without_hanging(det, tmp_path):
    path, _ = det
    tensors = path / "detector.safetensors"
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(tensors.read_bytes())
    tensors.unlink()
    tensors.symlink_to(outside)  # a link to an identical file outside the folder
    with pytest.raises(ValueError, match="symbolic link"):
        Detector.load(path)
    tensors.unlink()
    os.mkfifo(tensors)
    result: list = []
    worker = threading.Thread(target=lambda: result.append(_load_error(path)), daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert result and "not a regular file" in result[0]
    with pytest.raises(NotADirectoryError, match="is a file"):
        Detector.load(path / "detector.json")


def _load_error(path) -> str:
    try:
        Detector.load(path)
    except ValueError as exc:
        return str(exc)
    return "loaded"


def test_records_of_another_shape_get_a_named_error(det, forward_factory):
    path, _ = det
    other = _records(forward_factory, 1, 7, nl=1, h=2)  # another proxy: fewer layers and heads
    with pytest.raises(ValueError, match=r"detector .*expects"):
        Detector.load(path).score_records(other)


def test_round_trip_still_predicts_the_same(det):
    path, val = det
    again = Detector.load(path)
    assert np.isfinite(again.score_records(val)).all()


def _drop_last_raw_feature(prefix):
    def change(t):
        for key in ("mean", "scale", "center"):
            t[prefix + key] = t[prefix + key][:-1].copy()
        t[prefix + "components"] = t[prefix + "components"][:, :-1].copy()

    return change


@pytest.mark.parametrize(
    ("doc_change", "tensor_change", "message"),
    [
        (
            _block("A64", lambda b: b.update(components=4)),
            None,
            "12 rows, more than its config's components = 4",
        ),
        (None, lambda t: t.update({"block0.mean": np.zeros(3, np.float32)}), "block A7 fits nothing"),
        (None, _drop_last_raw_feature("block1."), "11 raw features, not a multiple of 2"),
    ],
    ids=["too-many-components", "tensor-on-A7", "A64-width-not-k-per-head"],
)
def test_arrays_that_disagree_with_the_configs_are_named(det, doc_change, tensor_change, message):
    path, _ = det
    _edit(path, doc_change=doc_change, tensor_change=tensor_change)
    with pytest.raises(ValueError, match=message) as err:
        Detector.load(path)
    assert str(path / "detector.safetensors") in str(err.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("val_auroc"), "field 'val_auroc' is missing"),
        (lambda d: d.pop("proxy"), "field 'proxy' is missing"),
        (lambda d: d.pop("layers"), "field 'layers' is missing"),
        (lambda d: d.update(layers=[]), "field 'layers' must name at least one layer"),
        (lambda d: d.update(layers=[0, 0]), "field 'layers' names a layer twice"),
        (lambda d: d.update(selection={"loso_auroc": 5}), r"'selection.loso_auroc' must lie in \[0.0, 1.0\]"),
        (lambda d: d.update(selection={"calibration_slope": -5}), "'selection.calibration_slope' must lie"),
        (
            lambda d: d.update(selection={"overlap_weight": 7, "probe_weight": -6}),
            r"'selection.overlap_weight' must lie in \[0.0, 1.0\]",
        ),
        (
            lambda d: d.update(selection={"overlap_weight": 0.7, "probe_weight": 0.7}),
            "must add up to 1",
        ),
        (lambda d: d.update(selection={"K": 1.5}), "'selection.K' must be a whole number"),
    ],
    ids=["no-val_auroc", "no-proxy", "no-layers", "layers-empty", "layers-twice", "loso_auroc",
         "slope", "weights-range", "weights-sum", "K-fraction"],
)  # fmt: skip
def test_resealed_missing_and_out_of_range_fields_are_named_by_the_cli_before_torch(det, change, message):
    from .test_cli_refusals import assert_refused  # noqa: TID252

    path, _ = det
    _edit(path, doc_change=change)
    with pytest.raises(ValueError, match=message) as err:
        Detector.load(path)
    assert str(path / "detector.json") in str(err.value)
    assert_refused(["predict", str(path), "--context", "c", "--answer", "a"], message.replace("\\", ""))


def test_a_threshold_too_large_for_a_float_is_named_at_once(det):
    from .test_cli_refusals import assert_refused  # noqa: TID252

    path, _ = det
    text = (path / "detector.json").read_text()
    doc = json.loads(text)
    (path / "detector.json").write_text(
        text.replace(f'"threshold": {json.dumps(doc["threshold"])}', '"threshold": 1e999')
    )
    with pytest.raises(
        ValueError, match=r"detector.json is not a valid detector file: it holds the number 1e999"
    ):
        Detector.load(path)
    assert_refused(["serve", str(path)], f"{path / 'detector.json'} is not a valid detector file")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_block("A7", lambda b: b.update(heads=[0, 10**9])), r"'blocks\[0\].heads' holds head 1000000000"),
        (lambda d: d.update(layers=[0, 99]), r"field 'layers' is \[0, 99\]; the proxy has layers 0-1"),
        (lambda d: d.update(hidden_layers=[99]), r"'hidden_layers' is \[99\]; the proxy has hidden states"),
    ],
    ids=["head-1e9", "layer-99", "hidden-99"],
)  # fmt: skip
def test_indices_beyond_the_proxy_are_named_when_it_loads_not_when_scoring(det, change, message, char_proxy):
    path, _ = det
    _edit(path, doc_change=change)
    loaded = Detector.load(path)  # the proxy's size (2 layers of 4 heads here) is known once it loads
    with pytest.raises(ValueError, match=message) as err:
        loaded.extractor("cpu")
    assert str(path / "detector.json") in str(err.value)
