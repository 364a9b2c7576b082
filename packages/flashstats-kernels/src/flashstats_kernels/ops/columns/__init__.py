"""T3 key-major column sums and means over response rows.

``naive`` is the fp64 reference, ``chunked`` the pure-PyTorch backend; the Triton kernel lives in
``fused`` and is imported only when the Triton backend is chosen.
"""

from flashstats_kernels.ops.columns.naive import naive_columns

__all__ = ["naive_columns"]
