"""T4 dense: the materialised response block, and the dense-pipeline baseline.

There is no fused kernel here by design: T4 is what needs the whole map. ``eager`` holds the PyTorch
implementation; the fp64 ``naive`` reference of the other ops serves as its reference.
"""

from flashstats_kernels.ops.dense.eager import dense_response_block, dense_statistics, row_topk_mass

__all__ = ["dense_response_block", "dense_statistics", "row_topk_mass"]
