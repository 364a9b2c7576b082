"""Root pytest configuration.

Sets ``TRITON_INTERPRET=1`` when no CUDA device is present, before any kernel module is imported,
so that CPU runs execute the real Triton kernels under Triton's interpreter.
"""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device; run through benchmarks/run_gpu.sh on the H200")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
