"""logit_statistics against a direct computation from sorted probabilities, on both backends.

The Triton kernels (interpreted here) split the vocabulary over programs and merge per row; the
PyTorch path is their reference."""

from __future__ import annotations

import math

import pytest
import torch
from flashstats_hf import LOGIT_STAT_NAMES, TOP_RANKS, logit_statistics

BACKENDS = ["torch", "triton"]


@pytest.mark.parametrize(
    ("shape", "backend"),
    [
        pytest.param(
            shape,
            backend,
            id=f"N{shape[0]}-V{shape[1]}-{backend}",
            marks=pytest.mark.slow if backend in slow else (),
        )
        for shape, slow in (((1, 5), ()), ((7, 33), ("triton",)), ((9, 1000), BACKENDS))
        for backend in BACKENDS
    ],
)  # the interpreted Triton kernel beyond the smallest vocabulary is slow on 2 CPU cores
def test_logit_statistics_match_sorted_probabilities(shape, backend):
    g = torch.Generator().manual_seed(shape[1])
    logits = torch.randn(shape, generator=g) * 3
    targets = torch.randint(0, shape[1], (shape[0],), generator=g)
    got = logit_statistics(logits, targets, backend=backend).double()
    assert got.shape == (shape[0], len(LOGIT_STAT_NAMES))
    for n in range(shape[0]):
        p = torch.softmax(logits[n].double(), -1)
        srt, order = torch.sort(p, descending=True)
        y = int(targets[n])
        rank = int((order == y).nonzero()) + 1
        ranked = torch.zeros(TOP_RANKS, dtype=torch.float64)
        ranked[: min(TOP_RANKS, shape[1])] = srt[:TOP_RANKS]
        exp = [
            p[y].log(),
            rank,
            -(p * p.log()).sum(),
            srt[0] - srt[1],
            srt[:5].sum(),
            srt[0].log() - p[y].log(),
            *ranked.tolist(),
        ]
        torch.testing.assert_close(got[n], torch.tensor(exp, dtype=torch.float64), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_answer_on_top_gives_rank_one_and_zero_gap(backend):
    logits = torch.tensor([[0.0, 5.0, 1.0, -2.0, 0.5, 0.1]])
    out = logit_statistics(logits, torch.tensor([1]), backend=backend)
    stats = dict(zip(LOGIT_STAT_NAMES, out[0].tolist(), strict=True))
    assert stats["answer_rank"] == 1.0 and stats["top1_answer_gap"] == 0.0
    assert stats["answer_logprob"] == pytest.approx(torch.log_softmax(logits, -1)[0, 1].item())
    assert math.log(stats["top_prob_1"]) == pytest.approx(stats["answer_logprob"], abs=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_seven_statistics_with_top_fifty_ranks_give_the_papers_224_candidates(backend):
    # Appendix L.2: six scalar statistics and the top-k probability at every rank up to 50, pooled 4 ways
    assert TOP_RANKS == 50 and len(LOGIT_STAT_NAMES) == 56 and 4 * len(LOGIT_STAT_NAMES) == 224
    assert LOGIT_STAT_NAMES[6:] == tuple(f"top_prob_{r}" for r in range(1, 51))
    logits = torch.randn(3, 30)  # a vocabulary smaller than 50: ranks beyond it are zero
    out = logit_statistics(logits, torch.zeros(3, dtype=torch.int64), backend=backend)
    assert out.shape == (3, 56) and torch.all(out[:, 6 + 30 :] == 0)
    torch.testing.assert_close(out[:, 6 : 6 + 30].sum(-1), torch.ones(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_vocabulary_entries_do_not_make_nans(backend):
    logits = torch.tensor([[2.0, float("-inf"), 1.0, 0.0, -1.0, -3.0]])
    assert torch.isfinite(logit_statistics(logits, torch.tensor([0]), backend=backend)).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.slow  # many vocabulary blocks under the interpreter; the small shapes above run by default
def test_triton_kernels_equal_the_reference_across_vocabulary_blocks(dtype):
    """Vocabularies of several blocks (256 logits each when interpreted) with a partial last block,
    strided rows, ties among the top logits and -inf entries: every column within 1e-5 of PyTorch."""
    g = torch.Generator().manual_seed(3)
    rows = (torch.randn(6, 1200, generator=g) * 4).to(dtype)
    rows[1, 700:] = float("-inf")  # whole blocks of masked entries
    rows[2, :60] = rows[2].max()  # ties across the top ranks
    logits = rows[:, :1100]  # strided rows
    targets = torch.tensor([0, 5, 1099, 700 - 1, 333, 1024])
    got = logit_statistics(logits, targets, backend="triton")
    ref = logit_statistics(logits, targets, backend="torch")
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match=r"logits \[N, V\]"):
        logit_statistics(torch.zeros(2, 3, 8), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="at least 5"):
        logit_statistics(torch.zeros(2, 4), torch.zeros(2, dtype=torch.int64))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("vocab", [49152, 128256, 151936], ids=["smollm2", "llama3", "qwen3"])
@pytest.mark.parametrize("rows", [1, 37])
def test_triton_logit_statistics_on_the_gpu_equal_pytorch(rows, vocab, dtype):
    """Real vocabulary sizes on CUDA: the compiled kernels against PyTorch on the same device."""
    g = torch.Generator(device="cuda").manual_seed(vocab + rows)
    logits = (torch.randn(rows, vocab, generator=g, device="cuda") * 4).to(dtype)
    targets = torch.randint(0, vocab, (rows,), generator=g, device="cuda")
    got = logit_statistics(logits, targets)  # auto: Triton on CUDA
    ref = logit_statistics(logits, targets, backend="torch")
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
