"""The batched torch MTopDiv against the NumPy reference (halluprobe.mtopdiv)."""

import numpy as np
import pytest
import torch
from halluprobe.detectors import mtopdiv
from halluprobe.features._toha import mtopdiv_batched


def _rows(n, r, length, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, r, length, generator=g, dtype=torch.float64) * 3
    causal = torch.ones(r, length, dtype=torch.bool).tril(length - r)  # row i sees keys <= L - R + i
    return torch.softmax(logits.masked_fill(~causal, float("-inf")), -1)


@pytest.mark.parametrize(
    ("n", "r", "length", "p"), [(1, 1, 2, 1), (3, 5, 12, 7), (7, 11, 63, 40), (2, 30, 111, 1)]
)
def test_batched_matches_the_numpy_reference(n, r, length, p):
    rows = _rows(n, r, length, seed=n * 1000 + r)
    got = mtopdiv_batched(rows, p)
    want = [mtopdiv(rows[i].numpy(), p) for i in range(n)]
    assert got.dtype == torch.float64 and got.shape == (n,)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mtopdiv_batched(rows.float(), p).numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("shape", "p"), [((2, 0, 5), 1), ((2, 3, 5), 0), ((2, 3, 5), 3)])
def test_bad_shapes_name_the_expected_layout(shape, p):
    with pytest.raises(ValueError, match=r"\[N, R, L\] with 1 <= P <= L - R"):
        mtopdiv_batched(torch.rand(shape), p)
