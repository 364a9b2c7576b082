"""Host-side features and the T1 accumulator merge, against direct computations on the fp64 reference."""

import flashstats_kernels as fk
import pytest
import torch


def inputs(seed=0, b=2, hq=4, hkv=2, r=6, seq=15, d=16):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, r, d, generator=gen, dtype=torch.float64)
    k = torch.randn(b, hkv, seq, d, generator=gen, dtype=torch.float64)
    v = torch.randn(b, hkv, seq, d, generator=gen, dtype=torch.float64)
    mask = torch.ones(b, seq, dtype=torch.bool)
    mask[0, :3] = False  # left padding
    mask[1, 5:7] = False  # padding in the middle
    return q, k, v, mask


def dense_probs(q, k, mask, window=None):
    return fk.dense_response_block(q, k, key_mask=mask, window=window).double()


@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("prompt_len", [9, torch.tensor([4, 12])], ids=["P9", "P-per-batch"])
def test_visible_key_counts_match_the_mask(window, prompt_len):
    q, k, _, mask = inputs()
    seq, r = k.shape[2], q.shape[2]
    n_p, n_r = fk.visible_key_counts(r, seq, key_mask=mask, prompt_len=prompt_len, window=window)
    vis = dense_probs(q, k, mask, window)[:, 0] > 0  # [B, R, L]: all weights are > 0 where visible
    plen = torch.as_tensor(prompt_len).expand(2)
    is_prompt = torch.arange(seq)[None, :] < plen[:, None]
    assert torch.equal(n_p, (vis & is_prompt[:, None]).sum(-1))
    assert torch.equal(n_r, (vis & ~is_prompt[:, None]).sum(-1))


def test_lookback_ratio_definition():
    q, k, v, mask = inputs(1)
    plen = torch.tensor([7, 10])
    res = fk.naive_response_attention(q, k, v, key_mask=mask, prompt_len=plen)
    got = fk.lookback_ratio(res.rows.prompt_mass, key_mask=mask, prompt_len=plen)
    p = dense_probs(q, k, mask)  # [B, H, R, L]
    vis = p > 0
    is_prompt = (torch.arange(k.shape[2])[None, :] < plen[:, None])[:, None, None]
    # mean weight per visible prompt / response key (0 when there is none: row 0 of batch 1 sits at 9 < 10)
    mean_prompt = ((p * is_prompt).sum(-1) / (vis & is_prompt).sum(-1)).nan_to_num(0.0)
    mean_resp = ((p * ~is_prompt).sum(-1) / (vis & ~is_prompt).sum(-1)).nan_to_num(0.0)
    torch.testing.assert_close(got.double(), mean_prompt / (mean_prompt + mean_resp), atol=1e-6, rtol=1e-6)


def test_lookback_ratio_edge_cases():
    pm = torch.tensor([[[0.0, 0.5]]])
    # P = 0: no prompt key, ratio 0; L = 2, R = 2.
    assert torch.equal(fk.lookback_ratio(pm, keys=2, prompt_len=0), torch.zeros(1, 1, 2))
    # the own position is padding and no response key is visible: ratio 1 where prompt keys are seen
    mask = torch.tensor([[True, False]])
    got = fk.lookback_ratio(torch.tensor([[[1.0]]]), key_mask=mask, prompt_len=1)
    assert torch.equal(got, torch.ones(1, 1, 1))
    with pytest.raises(ValueError, match="needs keys=L"):
        fk.lookback_ratio(pm)


def test_bos_sink_rate_from_lookups_equals_column_mean():
    q, k, v, mask = inputs(2)
    bos = fk.first_real_key(mask)
    assert bos.tolist() == [3, 0]
    plen = torch.tensor([5, 9])
    request = fk.StatsRequest(rows=False, lookups=True, columns=True, sink_positions=bos[:, None])
    for window in (None, 5):
        res = fk.response_attention(q, k, v, request=request, key_mask=mask, prompt_len=plen, window=window)
        rate = fk.bos_sink_rate(
            res.lookups.sink_weights[..., 0], bos, key_mask=mask, prompt_len=plen, window=window
        )
        want = torch.gather(res.columns.mean, 2, bos[:, None, None].expand(2, 4, 1))[..., 0]
        torch.testing.assert_close(rate, want, atol=1e-6, rtol=1e-6)


def test_topk_sink_rate():
    means = torch.tensor([[[0.1, 0.7, 0.3, 0.5]]])
    assert torch.allclose(fk.topk_sink_rate(means), torch.tensor([[0.7]]))
    assert torch.allclose(fk.topk_sink_rate(means, k=2), torch.tensor([[0.6]]))
    with pytest.raises(ValueError, match=r"k must be an int in \[1, L=4\]"):
        fk.topk_sink_rate(means, k=5)


def split_state(s, vis, is_prompt, cut):
    a = fk.row_state(s[..., :cut], vis[..., :cut], is_prompt[..., :cut])
    b = fk.row_state(s[..., cut:], vis[..., cut:], is_prompt[..., cut:])
    return a, b


@pytest.mark.parametrize("cut", [0, 1, 7, 15])
def test_merging_two_key_halves_equals_one_pass(cut):
    q, k, v, mask = inputs(3)
    mask[1, :] = False  # every row of batch element 1 sees nothing
    s = q @ k.repeat_interleave(2, 1).transpose(-1, -2) / 4.0  # scale 1/sqrt(16)
    r, seq = q.shape[2], k.shape[2]
    vis = (torch.arange(seq)[None, :] <= torch.arange(seq - r, seq)[:, None])[None, None] & mask[
        :, None, None
    ]
    is_prompt = (torch.arange(seq) < 9).expand(1, 1, 1, seq)
    merged = fk.merge_states(*split_state(s, vis, is_prompt, cut))
    whole = fk.row_state(s, vis, is_prompt)
    lse_m, stats_m = fk.finalize_state(merged)
    lse_w, stats_w = fk.finalize_state(whole)
    ref = fk.naive_response_attention(q, k, v, key_mask=mask, prompt_len=9)
    for lse in (lse_m, lse_w):
        torch.testing.assert_close(lse, ref.lse, atol=1e-12, rtol=1e-12)
    for name in ("entropy", "normalized_entropy", "prompt_mass", "max_weight", "effective_support"):
        torch.testing.assert_close(getattr(stats_m, name), getattr(ref.rows, name), atol=1e-10, rtol=1e-10)
        torch.testing.assert_close(getattr(stats_w, name), getattr(ref.rows, name), atol=1e-10, rtol=1e-10)


def test_merge_is_associative_and_commutative():
    q, k, _, mask = inputs(4)
    s = q @ k.repeat_interleave(2, 1).transpose(-1, -2)
    vis = mask[:, None, None].expand_as(s)
    is_prompt = (torch.arange(15) < 6).expand_as(s)
    parts = [
        fk.row_state(s[..., a:b], vis[..., a:b], is_prompt[..., a:b]) for a, b in ((0, 4), (4, 9), (9, 15))
    ]
    left = fk.merge_states(fk.merge_states(parts[0], parts[1]), parts[2])
    right = fk.merge_states(parts[0], fk.merge_states(parts[2], parts[1]))
    for name in ("m", "l", "a", "q2", "pm", "n"):
        torch.testing.assert_close(getattr(left, name), getattr(right, name), atol=1e-12, rtol=1e-12)


def test_dense_block_and_topk_mass():
    q, k, _, mask = inputs(5)
    probs = fk.dense_response_block(q.float(), k.float(), key_mask=mask, heads=[3, 0], window=6)
    ref = dense_probs(q, k, mask, window=6)
    assert probs.shape == (2, 2, 6, 15) and probs.dtype == torch.float32
    torch.testing.assert_close(probs.double(), ref[:, [3, 0]], atol=1e-6, rtol=1e-6)
    want = ref[:, [3, 0]].sort(-1, descending=True).values[..., :3].sum(-1)
    torch.testing.assert_close(fk.row_topk_mass(probs, 3).double(), want, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match=r"heads must lie in \[0, Hq=4\)"):
        fk.dense_response_block(q, k, heads=[4])
    same = fk.dense_response_block(q.float(), k.float(), key_mask=mask, heads=torch.tensor([3, 0]), window=6)
    torch.testing.assert_close(same, probs, atol=0, rtol=0)
    for bad in ([1.0], [True], "01", torch.tensor([[0]])):
        with pytest.raises(TypeError, match="1-D sequence of query-head indices"):
            fk.dense_response_block(q, k, heads=bad)


def test_dense_pipeline_in_fp32_matches_reference_and_bf16_is_coarser():
    q, k, v, mask = inputs(6, seq=40, r=20)
    q, k, v = q.float(), k.float(), v.float()
    request = fk.StatsRequest(rows=True, lookups=True, columns=True)
    ref = fk.naive_response_attention(q, k, v, request=request, key_mask=mask)
    exact = fk.dense_statistics(q, k, v, request=request, key_mask=mask, prob_dtype=torch.float32)
    coarse = fk.dense_statistics(q, k, v, request=request, key_mask=mask)
    ours = fk.response_attention(q, k, v, request=request, key_mask=mask, backend="torch")
    for name in ("entropy", "prompt_mass", "max_weight", "effective_support"):
        want = getattr(ref.rows, name)
        torch.testing.assert_close(getattr(exact.rows, name).double(), want, atol=5e-5, rtol=5e-5)
        err_ours = (getattr(ours.rows, name).double() - want).abs().max()
        err_bf16 = (getattr(coarse.rows, name).double() - want).abs().max()
        assert err_bf16 > 10 * err_ours, (name, err_bf16, err_ours)
    torch.testing.assert_close(exact.columns.mean.double(), ref.columns.mean, atol=5e-6, rtol=5e-6)
    torch.testing.assert_close(exact.lookups.diag_log.double(), ref.lookups.diag_log, atol=1e-4, rtol=1e-4)
