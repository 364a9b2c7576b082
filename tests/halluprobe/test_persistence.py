import json

import numpy as np
import pytest
from halluprobe.detectors._detector import FORMAT_VERSION, Detector
from halluprobe.detectors._detector_file import document_digest
from halluprobe.features import reduce_forward, token_records
from halluprobe.training import fit_blocks, make_blocks


def _records_from_forwards(forward_factory, n_batches, seed0):
    recs = []
    for s in range(n_batches):
        fs = forward_factory(answer_lens=(4, 3, 5), prompt_lens=(5, 6, 4), seed=seed0 + s)
        recs += reduce_forward(fs, [f"b{seed0 + s}-{i}" for i in range(3)])
    return recs


@pytest.fixture
def fitted(forward_factory):
    train = _records_from_forwards(forward_factory, 10, 0)
    val = _records_from_forwards(forward_factory, 6, 100)
    rng = np.random.default_rng(0)
    y_tr, y_va = rng.permutation(np.arange(30) % 2), rng.permutation(np.arange(18) % 2)
    fit = fit_blocks(make_blocks("ALL", heads=[0, 4], k=2), "ALL", train, y_tr, val, y_va)
    return fit, val


def test_save_load_round_trip(tmp_path, fitted):
    fit, val = fitted
    det = Detector.from_probe(fit, proxy="some/proxy", hidden_layers=(1,))
    det.save(tmp_path / "d")
    again = Detector.load(tmp_path / "d")
    np.testing.assert_array_equal(again.probe_.predict_proba(val), fit.predict_proba(val))
    assert again.probe_.threshold == fit.threshold and again.probe_.feature_set == "ALL"
    assert again.proxy == "some/proxy" and again.layers is None and again.hidden_layers == (1,)
    doc = json.loads((tmp_path / "d" / "detector.json").read_text())
    assert doc["format_version"] == FORMAT_VERSION
    assert {"torch", "scikit-learn", "halluprobe"} <= set(doc["versions"])
    assert [b["name"] for b in doc["blocks"]] == ["A7", "A64", "H64", "L9"]


def test_load_rejects_tampered_tensors_and_other_versions(tmp_path, fitted):
    fit, _ = fitted
    path = Detector.from_probe(fit, hidden_layers=(1,)).save(tmp_path / "d")
    tensors = path / "detector.safetensors"
    good = tensors.read_bytes()
    data = bytearray(good)
    data[-3] ^= 0x01
    tensors.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match the hash"):
        Detector.load(path)
    tensors.write_bytes(good)
    doc = json.loads((path / "detector.json").read_text())
    doc["format_version"] = FORMAT_VERSION + 1
    (path / "detector.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="format version"):
        Detector.load(path)
    doc["format_version"] = FORMAT_VERSION
    doc["blocks"][0]["name"] = "evil"
    (path / "detector.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="integrity hash"):
        Detector.load(path)
    doc["integrity"] = document_digest(doc)  # a deliberate edit with the hash recomputed
    (path / "detector.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="unknown feature block"):
        Detector.load(path)


def test_token_scores_average_to_the_answer_logit(forward_factory, fitted):
    fit, _ = fitted
    fs = forward_factory(answer_lens=(4, 3, 5), prompt_lens=(5, 6, 4), seed=999)
    recs = reduce_forward(fs, ["x", "y", "z"])
    for b, rec in enumerate(recs):
        tokens = token_records(fs, b, rec)
        assert len(tokens) == rec.answer_len
        per_token = fit.decision_function(tokens)
        assert np.ptp(per_token) > 0  # tokens differ
        np.testing.assert_allclose(
            per_token.mean(), fit.decision_function([rec])[0], rtol=1e-6, atol=1e-6
        )  # records are float32


def test_saved_files_follow_the_umask(tmp_path, fitted):
    import os
    import stat

    old = os.umask(0o022)
    try:
        Detector.from_probe(fitted[0], hidden_layers=(1,)).save(tmp_path / "d")
    finally:
        os.umask(old)
    for name in ("detector.json", "detector.safetensors"):
        assert stat.S_IMODE((tmp_path / "d" / name).stat().st_mode) == 0o644
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["detector.json", "detector.safetensors"]
