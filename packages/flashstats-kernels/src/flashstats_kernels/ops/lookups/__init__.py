"""T2 post-pass lookups from the stored LSE.

``naive`` is the fp64 reference, ``chunked`` the pure-PyTorch backend; the Triton kernel lives in
``fused`` and is imported only when the Triton backend is chosen.
"""

from flashstats_kernels.ops.lookups.naive import naive_lookups

__all__ = ["naive_lookups"]
