"""Response-stage forward: output, LSE and T1 row statistics.

``naive`` is the fp64 reference, ``chunked`` the pure-PyTorch backend over query tiles; the Triton
kernel lives in ``fused`` and is imported only when the Triton backend is chosen.
"""

from flashstats_kernels.ops.forward.naive import naive_forward

__all__ = ["naive_forward"]
