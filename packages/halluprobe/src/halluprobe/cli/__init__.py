"""The ``halluprobe`` command line: ``extract``, ``train``, ``select``, ``evaluate``, ``predict``, ``stream``.

``main`` is the console script. Importing it does not import torch or scikit-learn (each command imports
what it needs when it runs), so ``halluprobe --help`` answers at once.
"""

from __future__ import annotations

from halluprobe import _lazy
from halluprobe.cli._main import build_parser, main

__all__ = ["build_parser", "main"]

__getattr__ = _lazy.attach(__name__, {}, legacy="_main")[0]
