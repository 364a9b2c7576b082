"""Fitted blocks rebuilt from their saved state (config and arrays; no code runs from a file)."""

from __future__ import annotations

from typing import Any

import numpy as np

from halluprobe.blocks._blocks import A7Block, A64Block, Block, GBlock, H64Block, L9Block
from halluprobe.blocks._contrast import CONTRAST_FEATURES, CBlock

_BLOCKS = {c.name: c for c in (GBlock, CBlock, A7Block, A64Block, H64Block, L9Block)}


def block_from_state(config: dict[str, Any], arrays: dict[str, np.ndarray]) -> Block:
    """Rebuild a fitted block from `Block.state` output (no code is run from the file)."""
    config = dict(config)
    name = config.pop("name", None)
    if name not in _BLOCKS:
        raise ValueError(f"unknown feature block {name!r}; expected one of {sorted(_BLOCKS)}")
    if name == "L9" and "features" not in config:
        raise ValueError("this L9 block was refit per training split by an older halluprobe; retrain it")
    if name in ("A7", "L9", "G", "C"):
        config["features"] = tuple(config["features"])
    if name == "C" and config["features"] != CONTRAST_FEATURES:
        raise ValueError(
            f"this detector's C block reads the contrast features {list(config['features'])}; this "
            f"install computes {list(CONTRAST_FEATURES)}: retrain the detector with this version"
        )
    if name == "G":
        from halluprobe.features._grounding import feature_names

        if config["features"] != feature_names():
            raise ValueError(
                f"this detector's G block reads the grounding features {list(config['features'])}; this "
                f"install computes {list(feature_names())}: retrain the detector with this version"
            )
    block = _BLOCKS[name](**config)
    block.arrays = {k: np.asarray(v) for k, v in arrays.items()}
    return block
