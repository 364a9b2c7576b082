import numpy as np
import pytest
import torch
from halluprobe.features._records import HEAD_STATS, MAX_SINKS, lookback_ratio, pool, reduce_forward


def test_pool_matches_numpy():
    x = torch.tensor([[1.0, 2.0, 4.0, 100.0]])
    mask = torch.tensor([True, True, True, False])
    got = pool(x, mask).numpy()[0]
    ref = np.array([1.0, 2.0, 4.0])
    np.testing.assert_allclose(got, [ref.mean(), ref.std(), 1.0, 4.0], rtol=1e-6)


def test_pool_rejects_empty_mask():
    with pytest.raises(ValueError, match="at least one answer token"):
        pool(torch.ones(1, 2), torch.zeros(2, dtype=torch.bool))


def test_lookback_ratio_hand_values():
    # P = 4 prompt keys; token 0 sees 1 response key, token 1 sees 2.
    got = lookback_ratio(torch.tensor([0.5, 0.5, 1.0, 0.0]), 4).numpy()
    # token 0: (0.5/4) / (0.5/4 + 0.5/1) = 0.2 ; token 1: 0.125 / (0.125 + 0.25) = 1/3
    np.testing.assert_allclose(got, [0.2, 1 / 3, 1.0, 0.0], rtol=1e-6)
    with pytest.raises(ValueError, match="prompt_len"):
        lookback_ratio(torch.ones(3), 0)


def test_reduce_forward_pools_only_real_tokens(forward_factory):
    fs = forward_factory(answer_lens=(4, 3), prompt_lens=(5, 6))
    recs = reduce_forward(fs, ["a", "b"])
    assert [r.id for r in recs] == ["a", "b"]
    r = recs[1]
    assert r.answer_len == 3 and r.prompt_len == 6
    assert r.head_stats.shape == (2, 3, len(HEAD_STATS), 4)
    assert r.token_prev.shape == (2, 3, 3) and r.token_logit.shape == (3, 56)
    assert r.hidden_pooled.shape == (1, 2, 8)
    for rec in recs:  # NaN poison sits on padded answer slots: none may leak
        for arr in (rec.head_stats, rec.token_prev, rec.logit_pooled, rec.hidden_pooled, rec.sink_topk):
            assert np.isfinite(arr).all()
    # entropy mean of head (1, 2) of example b, by hand
    ent = fs.rows.entropy[1, 1, 2, :3].double().numpy()
    s = HEAD_STATS.index("entropy")
    np.testing.assert_allclose(
        r.head_stats[1, 2, s], [ent.mean(), ent.std(), ent.min(), ent.max()], rtol=1e-5
    )
    # lookback ratio comes from prompt mass and the prompt length of this example
    lr = lookback_ratio(fs.rows.prompt_mass[1, 0, 0, :3], 6).double().numpy()
    np.testing.assert_allclose(
        r.head_stats[0, 0, HEAD_STATS.index("lookback_ratio"), 0], lr.mean(), rtol=1e-5
    )
    np.testing.assert_allclose(r.hidden_pooled[0, 0], fs.hidden[1, 0, :3].mean(0).numpy(), rtol=1e-5)


def test_sink_topk_ignores_padded_keys(forward_factory):
    fs = forward_factory(answer_lens=(4, 3), prompt_lens=(5, 6))
    recs = reduce_forward(fs, ["a", "b"])
    for b, rec in enumerate(recs):
        vals = fs.columns.mean[b][..., fs.key_mask[b]]
        ref = vals.sort(-1, descending=True).values[..., :MAX_SINKS].numpy()
        n = ref.shape[-1]
        np.testing.assert_allclose(rec.sink_topk[..., :n], ref, rtol=1e-6)
        assert (rec.sink_topk[..., n:] == 0).all()
        assert rec.sink_topk.max() <= 1.0


def test_sink_topk_pads_short_sequences(forward_factory):
    fs = forward_factory(answer_lens=(2,), prompt_lens=(3,))
    (rec,) = reduce_forward(fs, ["x"])
    assert rec.sink_topk.shape[-1] == MAX_SINKS
    assert (rec.sink_topk[..., 5:] == 0).all() and (rec.sink_topk[..., :5] > 0).all()


def test_reduce_forward_validates(forward_factory):
    fs = forward_factory()
    with pytest.raises(ValueError, match="one id per example"):
        reduce_forward(fs, ["a"])
    fs.columns = None
    with pytest.raises(ValueError, match="columns"):
        reduce_forward(fs, ["a", "b"])


@pytest.mark.parametrize("pack", [False, True], ids=["padded-B3", "packed-B3"])
def test_records_of_reduced_columns_equal_those_of_full_columns(char_llama, pack):
    """Every value a block or detector reads is the same whether the forward kept full columns or not."""
    from flashstats_hf import record_forward

    g = torch.Generator().manual_seed(0)
    lengths, answers = (31, 7, 19), (6, 3, 5)  # the 7-token example has fewer keys than MAX_SINKS
    ids = torch.zeros(3, 31, dtype=torch.int64)
    mask = torch.zeros(3, 31, dtype=torch.int64)
    for b, n in enumerate(lengths):
        ids[b, 31 - n :] = torch.randint(2, 128, (n,), generator=g)
        mask[b, 31 - n :] = 1
    start = torch.tensor([31 - a for a in answers])
    kw = dict(response_start=start, attention_mask=mask, hidden_layers=[1], pack=pack)
    reduced = record_forward(char_llama, ids, **kw)
    full = record_forward(char_llama, ids, full_columns=True, **kw)
    assert reduced.columns is None and full.columns is not None
    for got, want in zip(
        reduce_forward(reduced, list("abc")), reduce_forward(full, list("abc")), strict=True
    ):
        for name in ("head_stats", "sink_topk", "token_prev", "logit_pooled", "token_logit", "hidden_pooled"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
        assert (got.answer_len, got.prompt_len) == (want.answer_len, want.prompt_len)
    assert (reduce_forward(reduced, list("abc"))[1].sink_topk[..., 7:] == 0).all()


def test_records_need_enough_reduced_columns(char_llama):
    from flashstats_hf import record_forward

    ids = torch.randint(2, 128, (1, 20), generator=torch.Generator().manual_seed(1))
    fs = record_forward(char_llama, ids, response_start=15, hidden_layers=[1], column_topk=MAX_SINKS - 1)
    with pytest.raises(ValueError, match="column_topk"):
        reduce_forward(fs, ["a"])
