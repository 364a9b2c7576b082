"""Context contrast: the forward without the context, block C, and detectors that read it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from flashstats_hf import LOGIT_STAT_NAMES
from halluprobe import Detector, FeatureCache, extract_records, parse_feature_set
from halluprobe.blocks._contrast import CONTRAST_FEATURES, contrast_matrix
from halluprobe.detectors._streaming import NO_WORDS
from halluprobe.features import _contrast
from halluprobe.features._contrast import BareFollower, bare_logprobs, bare_prompt
from halluprobe.features._extract import ProxyExtractor
from halluprobe.features._reads import detector_reads
from halluprobe.features._records import reduce_forward, token_records
from halluprobe.training._protocol import fit_blocks, make_blocks

from .conftest import Ex, text, tiny_model, tokenizer  # noqa: TID252


def _items(seed: int, n: int) -> list[Ex]:
    rng = np.random.default_rng(seed)
    return [Ex(f"x{i}", text(rng, 9 + i), text(rng, 2), text(rng, 3 + i % 3)) for i in range(n)]


def _c_detector(feature_set: str = "GCA7") -> Detector:
    """A detector of ``feature_set`` fitted on 40 examples of the tiny proxy, bound to it."""
    ext = ProxyExtractor(tiny_model(3), tokenizer())
    recs = ext(_items(0, 40))
    y = np.arange(40) % 2
    fit = fit_blocks(
        make_blocks(feature_set, heads=[0, 5], k=2), feature_set, recs[:24], y[:24], recs[24:], y[24:]
    )
    det = Detector.from_probe(fit, hidden_layers=ext.hidden_layers)
    ext.reads = detector_reads(det, 3, 4)  # what Detector.extractor() sets on a loaded proxy
    det._extractor = ext
    return det


def test_bare_logprobs_of_a_padded_batch_equal_one_unpadded_forward_each():
    model = tiny_model(2)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(6, 100, n).tolist() for n in (5, 9, 3)]
    answers = [rng.integers(6, 100, n).tolist() for n in (4, 2, 7)]
    got = bare_logprobs(model, prompts, answers)
    for p, a, g in zip(prompts, answers, got, strict=True):
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([p + a])).logits[0].float(), -1)
        want = logp[len(p) - 1 : -1].gather(-1, torch.tensor(a)[:, None])[:, 0]
        assert g.shape == (len(a),) and g.dtype == np.float32
        np.testing.assert_allclose(g, want.numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="non-empty"):
        bare_logprobs(model, [[]], [[7]])
    with pytest.raises(ValueError, match="one answer per prompt"):
        bare_logprobs(model, prompts, answers[:2])


def test_a_bare_follower_fed_in_chunks_equals_the_forward_over_the_whole_answer():
    model = tiny_model(2)
    rng = np.random.default_rng(1)
    prompt, answer = rng.integers(6, 100, 6).tolist(), rng.integers(6, 100, 9).tolist()
    follower = BareFollower(model, prompt)
    got = [follower.feed(answer[i:j]) for i, j in ((0, 1), (1, 4), (4, 4), (4, 9))]
    assert [len(g) for g in got] == [1, 3, 0, 5] and follower.logprobs.dtype == np.float32
    np.testing.assert_allclose(follower.logprobs, bare_logprobs(model, [prompt], [answer])[0], atol=1e-5)
    with pytest.raises(ValueError, match="non-empty prompt"):
        BareFollower(model, [])


def test_records_carry_each_answer_tokens_log_probability_with_and_without_the_context():
    ext = ProxyExtractor(tiny_model(2), tokenizer())
    items = _items(1, 4)
    col = LOGIT_STAT_NAMES.index("answer_logprob")
    for it, r in zip(items, ext(items), strict=True):
        ids, start = ext.encode(it)
        prompt = bare_prompt(ext.tokenizer, it.question)
        assert it.context.split()[0] not in ext.tokenizer.decode(prompt)  # the context is left out
        assert r.contrast.shape == (r.answer_len, 2)
        np.testing.assert_array_equal(r.contrast[:, 0], r.token_logit[:, col])
        want = bare_logprobs(ext.model, [prompt], [ids[start:]])[0]
        np.testing.assert_allclose(r.contrast[:, 1], want, atol=1e-5)
        assert not np.allclose(r.contrast[:, 0], r.contrast[:, 1])  # the context changes the proxy's belief
    assert "contrast" in ext.settings
    off = ProxyExtractor(ext.model, ext.tokenizer, contrast=False)
    assert "contrast" not in off.settings and off(items[:1])[0].contrast.shape == (0, 2)
    # log-probabilities without the context read already (streaming) are used as given, and checked
    bare = off(items[:1])
    given = [np.arange(bare[0].answer_len, dtype=np.float32)]
    np.testing.assert_array_equal(ext.with_contrast(bare, items[:1], bare=given)[0].contrast[:, 1], given[0])
    with pytest.raises(ValueError, match=r"one \[A\] array"):
        ext.with_contrast(bare, items[:1], bare=[given[0][:-1]])


def test_the_cache_keeps_the_contrast(tmp_path):
    ext = ProxyExtractor(tiny_model(2), tokenizer())
    items = _items(2, 3)
    first = extract_records(items, ext, FeatureCache(tmp_path / "c", ext.settings), batch_size=2)
    again = extract_records(
        items, lambda b: pytest.fail("recomputed"), FeatureCache(tmp_path / "c", ext.settings)
    )
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a.contrast, b.contrast)


def test_block_c_is_token_means_that_add_up_over_tokens(forward_factory):
    fs = forward_factory(answer_lens=(6, 4), prompt_lens=(5, 7))
    rng = np.random.default_rng(3)
    recs = [
        replace(r, contrast=rng.normal(-2.0, 2.0, (r.answer_len, 2)).astype(np.float32))
        for r in reduce_forward(fs, ["a", "b"])
    ]
    x = contrast_matrix(recs)
    assert x.shape == (2, len(CONTRAST_FEATURES))
    full, bare = recs[0].contrast.T.astype(np.float64)
    gain = full - bare
    want = [gain.mean(), (gain < 0).mean(), (gain < 0.5).mean(), bare.mean(), np.minimum(gain, 0).mean(),
            ((full < -3) & (gain < 1)).mean()]  # fmt: skip
    np.testing.assert_allclose(x[0], want)
    for b, r in enumerate(
        recs
    ):  # per-token pseudo-records average to the example (a linear probe's logit too)
        per_token = contrast_matrix(token_records(fs, b, r))
        np.testing.assert_allclose(per_token.mean(0), x[b], atol=1e-12)
    with pytest.raises(ValueError, match="have none"):
        contrast_matrix([replace(recs[0], contrast=np.zeros((0, 2), np.float32))])


def test_feature_sets_with_c_parse():
    assert parse_feature_set("GCA7H64") == ("G", "C", "A7", "H64")
    assert parse_feature_set("CA7") == ("C", "A7") and parse_feature_set("C") == ("C",)
    with pytest.raises(ValueError, match="distinct blocks"):
        parse_feature_set("CC")


@pytest.mark.slow
def test_a_detector_with_block_c_reads_the_contrast_and_scores_as_a_full_extraction(tmp_path):
    det = _c_detector()
    ext = det.extractor()
    assert det.uses_contrast and ext.reads.contrast and ext.reads.logits
    assert ext.reads.describe()["contrast"] is True
    rng = np.random.default_rng(8)
    triples = [(text(rng, 10), text(rng, 2), text(rng, 4)) for _ in range(3)]
    got = det.predict_batch(triples)
    # a single-answer recording (the streaming path) scores the same, and needs the text for block C
    ids, start = ext.encode(Ex("q", *triples[0]))
    fs = ext.forward([(ids, start)])
    tokens = ["t"] * (len(ids) - start)
    with pytest.raises(ValueError, match="block G or C"):
        det.score_stats(fs, tokens)
    assert det.score_stats(fs, tokens, text=triples[0]).probability == pytest.approx(
        got[0].probability, abs=1e-6
    )
    ext.reads = None  # a full extraction
    want = det.predict_batch(triples)
    for g, w in zip(got, want, strict=True):
        assert g.probability == pytest.approx(w.probability, abs=1e-6)
        np.testing.assert_allclose(g.token_scores, w.token_scores, atol=1e-6)
    det.save(tmp_path / "d")
    loaded = Detector.load(tmp_path / "d")
    assert [b.name for b in loaded.probe_.blocks] == ["G", "C", "A7"]
    recs = ext(_items(4, 3))
    np.testing.assert_array_equal(loaded.score_records(recs), det.score_records(recs))


def test_records_of_a_restricted_forward_are_cached_apart_from_a_full_extraction(tmp_path):
    """A detector's forward leaves NaN where it reads nothing: a later full extraction never reuses it."""
    det = _c_detector("GA7")  # reads two heads and no contrast
    ext = det.extractor()
    restricted = dict(ext.settings)
    assert restricted["reads"]["layers"] == ext.reads.layers and "contrast" not in restricted
    items = _items(6, 2)
    part = extract_records(items, ext, FeatureCache(tmp_path / "c", ext.settings), batch_size=2)
    assert np.isnan(part[0].head_stats).any() and part[0].contrast.shape == (0, 2)
    full_settings = ext.full_settings  # what a full extraction keys its records by
    assert ext.reads is not None and "reads" not in full_settings and "contrast" in full_settings
    ext.reads = None
    assert ext.settings == full_settings
    full = extract_records(items, ext, FeatureCache(tmp_path / "c", ext.settings), batch_size=2)
    assert not np.isnan(full[0].head_stats).any() and full[0].contrast.shape[0] > 0


def test_a_detector_of_g_and_c_alone_streams_and_batches_as_it_predicts(monkeypatch):
    """Like the packaged detector: no attention statistic read, the logits and the forward without context."""
    from halluprobe import StreamingScorer
    from halluprobe.detectors import stream_text_chunks

    det = _c_detector("GC")
    assert det.extractor().reads.layers == () and det.extractor().reads.contrast
    rng = np.random.default_rng(5)
    context, question, answer = text(rng, 14), text(rng, 3), text(rng, 7)
    with monkeypatch.context() as m:  # streaming keeps the forward without the context as a KV cache
        m.setattr(_contrast, "bare_logprobs", lambda *a: pytest.fail("the contrast forward reran"))
        follower = StreamingScorer(det).follow(context, question)
        updates = [u for chunk in stream_text_chunks(answer, 2) if (u := follower.add(chunk)) is not None]
        updates.append(follower.finish())
        generated = list(StreamingScorer(det).generate(context, question, max_new_tokens=4))
    final = det.predict_text(context, question, answer)
    ids = [t for u in generated for t in u.token_ids]
    said = det.extractor().tokenizer.decode(ids, clean_up_tokenization_spaces=False)
    first = det.extractor().tokenizer.decode(generated[0].token_ids, clean_up_tokenization_spaces=False)
    assert len(ids) == 4 and not first.strip()  # the first update read a blank answer
    # the generated answer scored from one teacher-forced forward of the same ids (the contrast reruns)
    ext = det.extractor()
    prompt = ext.encode(Ex("g", context, question, answer))
    prompt_ids = prompt[0][: prompt[1]]
    taught = det.score_stats(
        ext.forward([(prompt_ids + ids, len(prompt_ids))]), ["t"] * len(ids),
        text=(context, question, said if said.strip() else NO_WORDS), answer_ids=ids,
    )  # fmt: skip
    assert generated[-1].probability == pytest.approx(taught.probability, abs=1e-4)
    assert updates[-1].probability == pytest.approx(final.probability, abs=1e-4)
    np.testing.assert_allclose(follower.prediction().token_scores, final.token_scores, atol=1e-4)
    batch = det.predict_batch([(context, question, answer), (text(rng, 9), "", text(rng, 4))])
    assert batch[0].probability == pytest.approx(final.probability, abs=1e-6)
