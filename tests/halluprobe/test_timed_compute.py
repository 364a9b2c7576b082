"""TimedCompute: memory splitting, a loud backend fallback, timing and a deadline around an extractor."""

import time

import pytest
import torch
from halluprobe.features import DeadlineReached, TimedCompute


class FakeExtractor:
    """Records are the example ids; fails as told (out of memory above a batch size, or a kernel error)."""

    def __init__(self, max_batch=None, kernel_error=False):
        self.backend, self.max_batch, self.kernel_error, self.calls = "auto", max_batch, kernel_error, []

    def __call__(self, batch):
        self.calls.append((self.backend, len(batch)))
        if self.max_batch is not None and len(batch) > self.max_batch:
            raise torch.OutOfMemoryError("CUDA out of memory")
        if self.kernel_error and self.backend != "torch":
            raise RuntimeError("triton compile failed")
        return [f"rec-{ex}" for ex in batch]


def test_a_batch_out_of_memory_is_redone_one_by_one(capsys):
    compute = TimedCompute(FakeExtractor(max_batch=1))
    assert compute(["a", "b", "c"]) == ["rec-a", "rec-b", "rec-c"]
    assert compute.count == 3 and compute.seconds >= 0.0
    assert compute.log == ["out of memory on a batch of 3; redone one by one"]
    assert "out of memory" in capsys.readouterr().out


def test_a_kernel_failure_falls_back_to_torch_and_says_so(capsys):
    ext = FakeExtractor(kernel_error=True)
    compute = TimedCompute(ext)
    assert compute(["a"]) == ["rec-a"] and ext.backend == "torch"
    assert ext.calls == [("auto", 1), ("torch", 1)]
    assert "falling back to torch" in compute.log[0] and "falling back" in capsys.readouterr().out
    on_torch = FakeExtractor(kernel_error=True)
    on_torch.backend = "torch"
    on_torch.kernel_error = False
    on_torch.max_batch = 0  # every call fails: out of memory even alone
    with pytest.raises(torch.OutOfMemoryError):  # nothing left to split or fall back to: the caller's
        TimedCompute(on_torch)(["b"])


def test_past_the_deadline_no_batch_runs():
    ext = FakeExtractor()
    with pytest.raises(DeadlineReached):
        TimedCompute(ext, deadline=time.time() - 1)(["a"])
    assert ext.calls == []
    assert TimedCompute(ext, deadline=time.time() + 60)(["a"]) == ["rec-a"]
