"""The packaged detector gives, to the last bit, the probabilities it gave when it was saved.

The golden file was written by the code that trained the packaged detector (hand-written standardiser);
the blocks now fit with scikit-learn's ``StandardScaler`` / ``PCA`` and save the same arrays in
safetensors, and a saved detector must load and score exactly as before.
"""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from halluprobe import Detector
from halluprobe.detectors._default import packaged_path

GOLDEN = Path(__file__).parent / "golden" / "packaged_probabilities.json"


def _records(record_factory, seed: int = 2026, n: int = 12):
    """Records with random grounding features and per-token context contrast (what G and C read)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        rec = record_factory(f"r{i}", rng)
        a = int(rng.integers(1, 9))
        full = -rng.gamma(1.5, 1.2, a)
        bare = full - rng.normal(0.3, 1.0, a)
        contrast = np.stack([full, bare], 1).astype(np.float32)
        out.append(replace(rec, grounding=rng.random(12).astype(np.float32), contrast=contrast))
    return out


def test_packaged_detector_probabilities_are_unchanged(record_factory):
    folder = packaged_path()
    if not (folder / "detector.json").is_file():
        pytest.skip("this checkout has no packaged detector")
    det = Detector.load(folder)
    golden = json.loads(GOLDEN.read_text())
    assert golden["feature_set"] == det.probe_.feature_set
    got = det.probe_.predict_proba(_records(record_factory))[:, 1]
    assert got.tolist() == golden["probabilities"]  # bit for bit
