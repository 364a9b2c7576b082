"""Decoding rows against a long key cache: T1 and T2 per new row, T3 accumulated into a running state.

``naive`` is the fp64 reference, ``chunked`` the pure-PyTorch backend; the split-K Triton kernels live
in ``kernels`` and their launcher in ``fused``, imported only when the Triton backend is chosen.
"""

from flashstats_kernels.ops.decode.naive import naive_decode

__all__ = ["naive_decode"]
