"""The one pooling helper: float64 reference, masks, and halluprobe's records pooling through it."""

import pytest
import torch
from flashstats_hf import POOL_NAMES, pool_tokens


def _reference(x, keep):
    out = []
    for row, k in zip(x.double(), keep, strict=True):
        v = row[k]
        out.append([v.mean(), ((v - v.mean()) ** 2).mean().sqrt(), v.min(), v.max()])
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("t", [1, 7, 63])
def test_pool_tokens_matches_the_reference_with_and_without_mask(t):
    g = torch.Generator().manual_seed(t)
    x = torch.randn(5, t, generator=g, dtype=torch.float64)
    keep = torch.rand(5, t, generator=g) < 0.6
    keep[:, 0] = True
    assert POOL_NAMES == ("mean", "std", "min", "max")
    torch.testing.assert_close(pool_tokens(x, 1, keep), _reference(x, keep))
    torch.testing.assert_close(pool_tokens(x, 1), _reference(x, torch.ones_like(keep)))


def test_halluprobe_records_pool_through_the_helper():
    from halluprobe.features._records import POOLS, pool

    assert POOLS is POOL_NAMES
    x = torch.randn(3, 4, 9)
    mask = torch.tensor([True, False, True, True, False, True, True, True, False])
    torch.testing.assert_close(pool(x, mask), pool_tokens(x[..., mask].double(), -1).float())
    with pytest.raises(ValueError, match="at least one answer token"):
        pool(x, torch.zeros(9, dtype=torch.bool))
