"""The fp64 naive reference against a brute-force loop over every (batch, head, row, key) element.

The loop follows SEMANTICS.md line by line with Python floats, so the reference that every backend is
checked against is itself checked here.
"""

import math

import pytest
import torch
from flashstats_kernels import StatsRequest, naive_response_attention

TOL = 1e-9  # fp64 reference vs Python-float loop


def brute_force(q, k, v, *, key_mask, prompt_len, scale, softcap, window, sinks, diag_eps):
    """Per-element loop; returns a dict of nested lists."""
    b_n, hq, r_n, d = q.shape
    hkv, seq = k.shape[1], k.shape[2]
    group = hq // hkv
    out = {
        name: torch.zeros(b_n, hq, r_n, dtype=torch.float64)
        for name in (
            "lse",
            "entropy",
            "normalized_entropy",
            "prompt_mass",
            "max_weight",
            "effective_support",
            "diag_log",
            "prev_weight",
        )
    }
    out["out"] = torch.zeros(b_n, hq, r_n, d, dtype=torch.float64)
    out["sink_weights"] = torch.zeros(b_n, hq, r_n, len(sinks[0]), dtype=torch.float64)
    col_sum = torch.zeros(b_n, hq, seq, dtype=torch.float64)
    col_cnt = torch.zeros(b_n, seq, dtype=torch.float64)
    for b in range(b_n):
        for h in range(hq):
            kv = h // group
            for i in range(r_n):
                p_i = seq - r_n + i
                vis = [
                    j
                    for j in range(seq)
                    if j <= p_i
                    and (key_mask is None or bool(key_mask[b, j]))
                    and (window is None or p_i - window < j)
                ]
                scores = {}
                for j in vis:
                    s = scale * sum(float(q[b, h, i, c]) * float(k[b, kv, j, c]) for c in range(d))
                    if softcap is not None:
                        s = softcap * math.tanh(s / softcap)
                    scores[j] = s
                if vis:
                    m = max(scores.values())
                    lse = m + math.log(sum(math.exp(s - m) for s in scores.values()))
                else:
                    lse = -math.inf
                p = {j: math.exp(scores[j] - lse) for j in vis}
                out["lse"][b, h, i] = lse
                for c in range(d):
                    out["out"][b, h, i, c] = sum(p[j] * float(v[b, kv, j, c]) for j in vis)
                ent = -sum(pj * math.log(pj) for pj in p.values() if pj > 0)
                out["entropy"][b, h, i] = ent
                out["normalized_entropy"][b, h, i] = ent / math.log(len(vis)) if len(vis) > 1 else 0.0
                out["prompt_mass"][b, h, i] = sum(pj for j, pj in p.items() if j < prompt_len[b])
                out["max_weight"][b, h, i] = max(p.values(), default=0.0)
                out["effective_support"][b, h, i] = 1 / sum(pj * pj for pj in p.values()) if vis else 0.0
                diag = p.get(p_i, 0.0)
                out["diag_log"][b, h, i] = (
                    max(math.log(diag), math.log(diag_eps)) if diag > 0 else math.log(diag_eps)
                )
                out["prev_weight"][b, h, i] = p.get(p_i - 1, 0.0) if p_i > prompt_len[b] else 0.0
                for s_idx, pos in enumerate(sinks[b]):
                    out["sink_weights"][b, h, i, s_idx] = p.get(pos, 0.0)
                counted = p_i >= prompt_len[b] and (key_mask is None or bool(key_mask[b, p_i])) and vis
                if counted:
                    for j, pj in p.items():
                        col_sum[b, h, j] += pj
                        if h == 0:
                            col_cnt[b, j] += 1
    out["sum"] = col_sum
    out["mean"] = torch.where(col_cnt[:, None] > 0, col_sum / col_cnt.clamp(min=1)[:, None], 0.0)
    return out


CASES = {
    "B2-HQ4-H2-R3-L7-D5": dict(b=2, hq=4, hkv=2, r=3, seq=7, d=5),
    "B1-HQ2-H1-R1-L1-D3": dict(b=1, hq=2, hkv=1, r=1, seq=1, d=3),
    "B1-HQ4-H1-R6-L6-D4-window": dict(b=1, hq=4, hkv=1, r=6, seq=6, d=4, window=3),
    "B2-HQ2-H2-R4-L9-D3-softcap-mask": dict(b=2, hq=2, hkv=2, r=4, seq=9, d=3, softcap=1.5, mask=True),
    "B3-HQ2-H1-R2-L5-D2-pl-full-mask": dict(b=3, hq=2, hkv=1, r=2, seq=5, d=2, mask=True, per_batch=True),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_naive_matches_brute_force(case):
    gen = torch.Generator().manual_seed(7)
    b, hq, hkv, r, seq, d = (case[x] for x in ("b", "hq", "hkv", "r", "seq", "d"))
    q = torch.randn(b, hq, r, d, generator=gen, dtype=torch.float64) * 2
    k = torch.randn(b, hkv, seq, d, generator=gen, dtype=torch.float64) * 2
    v = torch.randn(b, hkv, seq, d, generator=gen, dtype=torch.float64)
    key_mask = None
    if case.get("mask"):
        key_mask = torch.rand(b, seq, generator=gen) > 0.3
        key_mask[0, : seq // 2] = False  # left padding
        if b > 2:
            key_mask[2] = False  # every row of this batch element is fully masked
    if case.get("per_batch"):
        prompt_len = torch.tensor([0, seq - 1, seq], dtype=torch.int64)[:b]
        sinks = torch.tensor([[0, 2], [1, seq], [-1, 3]], dtype=torch.int64)[:b]
    else:
        prompt_len = seq - r
        sinks = (0, seq - 1)
    scale, softcap, window = 0.7, case.get("softcap"), case.get("window")
    request = StatsRequest(rows=True, lookups=True, columns=True, sink_positions=sinks, diag_eps=1e-12)
    res = naive_response_attention(
        q,
        k,
        v,
        request=request,
        key_mask=key_mask,
        prompt_len=prompt_len,
        scale=scale,
        softcap=softcap,
        window=window,
    )
    pl = prompt_len.tolist() if isinstance(prompt_len, torch.Tensor) else [prompt_len] * b
    sk = sinks.tolist() if isinstance(sinks, torch.Tensor) else [list(sinks)] * b
    want = brute_force(
        q,
        k,
        v,
        key_mask=key_mask,
        prompt_len=pl,
        scale=scale,
        softcap=softcap,
        window=window,
        sinks=sk,
        diag_eps=1e-12,
    )
    got = {"out": res.out, "lse": res.lse, **vars(res.rows), **vars(res.lookups), **vars(res.columns)}
    assert set(want) == set(got)
    for name, w in want.items():
        g = got[name]
        assert g.dtype == torch.float64, name
        assert g.shape == w.shape, name
        assert not torch.isnan(g).any(), name
        torch.testing.assert_close(g, w, atol=TOL, rtol=TOL, msg=name)


def test_fully_masked_row_values():
    q = torch.randn(1, 2, 2, 4, dtype=torch.float64)
    k = torch.randn(1, 1, 3, 4, dtype=torch.float64)
    v = torch.randn(1, 1, 3, 4, dtype=torch.float64)
    key_mask = torch.zeros(1, 3, dtype=torch.bool)
    res = naive_response_attention(
        q,
        k,
        v,
        request=StatsRequest(rows=True, lookups=True, columns=True, diag_eps=1e-20),
        key_mask=key_mask,
    )
    assert torch.equal(res.out, torch.zeros_like(res.out))
    assert torch.isneginf(res.lse).all()
    for t in vars(res.rows).values():
        assert torch.equal(t, torch.zeros_like(t))
    assert torch.allclose(res.lookups.diag_log, torch.full_like(res.lookups.diag_log, math.log(1e-20)))
    assert not res.lookups.prev_weight.any() and not res.lookups.sink_weights.any()
    assert not res.columns.sum.any() and not res.columns.mean.any()
