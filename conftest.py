"""Root pytest configuration.

Sets ``TRITON_INTERPRET=1`` when no CUDA device is present, before any kernel module is imported,
so that CPU runs execute the real Triton kernels under Triton's interpreter.

Test selection: ``pytest`` runs the fast tests (every module, one case per behaviour) and leaves out
the tests marked ``slow``; ``pytest --all`` runs everything (CI does), ``pytest -m slow`` only the slow
ones, and any ``-m`` expression or an explicit test id (``file.py::test``) selects as written.
"""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_addoption(parser):
    parser.addoption(
        "--all",
        action="store_true",
        default=False,
        help="also run the tests marked slow (the default run leaves them out; CI runs everything)",
    )


def _keeps_slow_tests(config) -> bool:
    """Whether this run selects the slow tests itself: --all, a -m expression, or explicit test ids."""
    return bool(
        config.getoption("--all") or config.getoption("markexpr") or any("::" in arg for arg in config.args)
    )


def pytest_collection_modifyitems(config, items):
    if not _keeps_slow_tests(config):
        slow = [item for item in items if "slow" in item.keywords]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if "slow" not in item.keywords]
    if HAS_CUDA:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device; run through benchmarks/run_gpu.sh on the H200")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


def pytest_report_header(config):
    if not _keeps_slow_tests(config):
        return "tests marked slow are left out: `pytest --all` runs everything, `pytest -m slow` only them"
    return None
