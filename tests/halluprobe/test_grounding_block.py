"""Grounding features in records (`halluprobe.features`), the G block, and detectors that read it."""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from halluprobe import Detector, FeatureCache, GBlock, extract_records, fill_grounding, parse_feature_set
from halluprobe.features._grounding import cached_records, legacy_settings
from halluprobe.training._protocol import fit_blocks, make_blocks
from halubench_data.grounding import GROUNDING_FEATURES, grounding_features

G = len(GROUNDING_FEATURES)
TEXTS = [
    ("Ada lives in Lyon and works at Tarrow.", "Where?", "Ada lives in Lyon."),
    ("Ada lives in Lyon and works at Tarrow.", "Where?", "Ada lives in Rome since 1999."),
    ("The sky is blue today and warm.", "Colour?", "Blue and warm."),
    ("Ben has two cats.", "", "Ben has three dogs and a parrot named Kiwi."),
]


def _examples(n=4):
    return [
        SimpleNamespace(id=f"e{i}", context=c, question=q, answer=a)
        for i, (c, q, a) in enumerate((TEXTS * (n // len(TEXTS) + 1))[:n])
    ]


def _want(ex):
    """The grounding features a record stores (float32)."""
    return grounding_features(ex.context, ex.question, ex.answer).astype(np.float32)


@pytest.mark.parametrize(
    ("name", "blocks"),
    [("GA7L9", ("G", "A7", "L9")), ("GH64", ("G", "H64")), ("GA64H64L9", ("G", "A64", "H64", "L9")),
     ("H64G", ("G", "H64")), ("G", ("G",)), ("ALL", ("A7", "A64", "H64", "L9"))],
)  # fmt: skip
def test_feature_sets_with_g_parse(name, blocks):
    assert parse_feature_set(name) == blocks


@pytest.mark.parametrize("bad", ["GG", "GA7G", "Gx", "g"])
def test_bad_g_feature_sets_are_refused(bad):
    with pytest.raises(ValueError, match="not a concatenation of distinct blocks"):
        parse_feature_set(bad)


def test_fill_grounding_computes_the_text_features(record_factory):
    rng = np.random.default_rng(0)
    exs = _examples()
    recs = [record_factory(ex.id, rng) for ex in exs]
    assert all(r.grounding.shape == (0,) for r in recs)  # made without grounding
    filled = fill_grounding(recs, exs)
    for r, ex in zip(filled, exs, strict=True):
        np.testing.assert_array_equal(r.grounding, _want(ex))
        assert r.grounding.dtype == np.float32
    assert all(r.grounding.shape == (0,) for r in recs)  # the given records are unchanged
    kept = replace(filled[0], grounding=np.full(G, 7.0, np.float32))
    assert fill_grounding([kept], exs[:1])[0].grounding[0] == 7.0  # present: left alone
    assert fill_grounding([kept], exs[:1], overwrite=True)[0].grounding[0] != 7.0
    with pytest.raises(ValueError, match="ids differ"):
        fill_grounding(recs[:2], exs[1:3])


def test_g_block_standardises_and_refuses_records_without_grounding(record_factory):
    rng = np.random.default_rng(1)
    exs = _examples(8)
    recs = fill_grounding([record_factory(ex.id, rng) for ex in exs], exs)
    block = GBlock().fit(recs)
    z = block.transform(recs)
    assert z.shape == (8, G)
    raw = np.stack([r.grounding for r in recs]).astype(np.float64)
    np.testing.assert_allclose(z, (raw - raw.mean(0)) / np.where(raw.std(0) > 1e-12, raw.std(0), 1.0))
    config, arrays = block.state()
    assert config == {"name": "G", "features": list(GROUNDING_FEATURES)} and set(arrays) == {"mean", "scale"}
    with pytest.raises(ValueError, match=r"records \['r0'\] have others .*fill_grounding"):
        block.transform([record_factory("r0", rng)])


def _g_detector(record_factory, name="GA7L9"):
    rng = np.random.default_rng(2)
    exs = _examples(24)
    recs = fill_grounding([record_factory(ex.id, rng) for ex in exs], exs)
    y = np.arange(24) % 2
    fit = fit_blocks(make_blocks(name, heads=[0, 1], k=1), name, recs[:16], y[:16], recs[16:], y[16:])
    return Detector.from_probe(fit, hidden_layers=(1,)), recs


def test_detector_with_g_saves_loads_and_checks_its_features(record_factory, tmp_path):
    import json

    from halluprobe.detectors import _detector_file as dfile

    det, recs = _g_detector(record_factory)
    det.save(tmp_path / "d")
    loaded = Detector.load(tmp_path / "d")
    assert loaded.uses_grounding and [b.name for b in loaded.probe_.blocks] == ["G", "A7", "L9"]
    np.testing.assert_array_equal(loaded.score_records(recs), det.score_records(recs))
    # a G block saved with other grounding features than this install computes is refused
    doc = json.loads((tmp_path / "d" / "detector.json").read_text())
    doc["blocks"][0]["features"] = [*GROUNDING_FEATURES[:-1], "renamed"]
    doc.pop("integrity")
    doc["integrity"] = dfile.document_digest(doc)
    (tmp_path / "d" / "detector.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="reads the grounding features .* retrain"):
        Detector.load(tmp_path / "d")


def test_extractor_fills_grounding_and_names_it_in_its_settings(char_llama, char_extractor, tmp_path):
    ext = char_extractor(char_llama)
    assert ext.settings["grounding"]["features"] == list(GROUNDING_FEATURES)
    exs = _examples()
    recs = extract_records(exs, ext, FeatureCache(tmp_path, ext.settings), batch_size=2)
    for r, ex in zip(recs, exs, strict=True):
        np.testing.assert_array_equal(r.grounding, _want(ex))
    again = FeatureCache(tmp_path, ext.settings).load([ex.id for ex in exs])  # the cache keeps them
    np.testing.assert_array_equal(again[1].grounding, recs[1].grounding)


def test_a_cache_from_before_grounding_still_serves(record_factory, tmp_path):
    rng = np.random.default_rng(3)
    exs = _examples()
    settings = {"proxy": "p", "grounding": {"features": list(GROUNDING_FEATURES), "version": None}}
    old = FeatureCache(tmp_path / "old", legacy_settings(settings))  # written before records had grounding
    old.add([record_factory(ex.id, rng) for ex in exs[:2]], [old.key(ex) for ex in exs[:2]])
    new = FeatureCache(tmp_path / "new", settings)
    new.add(fill_grounding([record_factory("e2", rng)], exs[2:3]), [new.key(exs[2])])
    found = cached_records(exs, [new, FeatureCache(tmp_path / "old", settings)])
    assert sorted(found) == ["e0", "e1", "e2"]  # e3 is in no cache: the proxy runs for it alone
    for ex in exs[:3]:
        np.testing.assert_array_equal(found[ex.id].grounding, _want(ex))
    assert len(new) == 1 and len(old) == 2  # nothing copied or written
    edited = SimpleNamespace(id="e0", context=exs[0].context, question=exs[0].question, answer="Edited.")
    assert cached_records([edited], [FeatureCache(tmp_path / "old", settings)]) == {}  # content-keyed
    other = {**settings, "proxy": "q"}  # other proxy settings: nothing, legacy or not
    assert cached_records(exs, [FeatureCache(tmp_path / "old", other)]) == {}


@pytest.mark.slow
def test_predict_with_a_g_detector(char_llama, char_extractor, monkeypatch):
    from halluprobe.features._records import reduce_forward

    ext = char_extractor(char_llama)
    exs = _examples(16)
    encoded = [ext.encode(ex) for ex in exs]
    recs = fill_grounding(reduce_forward(ext.forward(encoded), [ex.id for ex in exs]), exs)
    y = np.arange(16) % 2
    fit = fit_blocks(make_blocks("GL9", heads=[0], k=1), "GL9", recs[:10], y[:10], recs[10:], y[10:])
    det = Detector.from_probe(fit, hidden_layers=ext.hidden_layers)
    monkeypatch.setattr(Detector, "extractor", lambda self, device=None: ext)
    c, q, a = TEXTS[1]
    pred = det.predict_text(c, q, a)
    (want,) = det.score_records(recs[1:2])
    assert pred.probability == pytest.approx(float(want), abs=1e-5)
    fs = ext.forward([ext.encode(exs[1])])
    with pytest.raises(ValueError, match=r"score_stats needs text=\(context, question, answer\)"):
        det.score_stats(fs, list(a))
    assert det.score_stats(fs, list(a), text=(c, q, a)).probability == pytest.approx(
        pred.probability, abs=1e-5
    )
