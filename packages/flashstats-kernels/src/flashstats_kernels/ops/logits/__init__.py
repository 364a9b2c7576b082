"""Per-token statistics of next-token distributions (the logit statistics a probe reads).

``naive`` is the PyTorch reference (and the CPU path); the Triton kernels live in ``fused`` and are
imported only when the Triton backend is chosen.
"""

from flashstats_kernels.ops.logits.naive import naive_logit_statistics

__all__ = ["naive_logit_statistics"]
