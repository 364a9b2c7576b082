"""The context contrast block C: what the context adds to the proxy's belief in each answer token."""

from __future__ import annotations

import numpy as np

from halluprobe.blocks._blocks import GBlock
from halluprobe.features._records import ExampleRecord

CONTRAST_FEATURES: tuple[str, ...] = (
    "context_gain.mean",
    "context_loss_share",
    "weak_gain_share",
    "bare_logprob.mean",
    "context_loss.mean",
    "unexplained_surprise_share",
)
"""The C block's features, each a mean over answer tokens of ``g_t = log q(y_t | context) - log q(y_t |
no context)``: ``g_t``; ``[g_t < 0]``; ``[g_t < 0.5]``; ``log q(y_t | no context)``; ``min(g_t, 0)``;
``[log q(y_t | context) < -3 and g_t < 1]`` (a surprising token that the context does not explain)."""


def contrast_matrix(records: list[ExampleRecord]) -> np.ndarray:
    """``[n, len(CONTRAST_FEATURES)]`` the context-contrast features of each record (token means).

    Raises:
        ValueError: a record has no contrast (made without the contrast forward).
    """
    bad = [r.id for r in records if r.contrast.ndim != 2 or r.contrast.shape[1] != 2 or not len(r.contrast)]
    if bad:
        raise ValueError(
            f"feature block C reads each answer token's log-probability with and without the context; "
            f"records {bad[:3]} have none (extract them with this version's ProxyExtractor, which runs "
            "the contrast forward)"
        )
    rows = []
    for r in records:
        full, bare = r.contrast[:, 0].astype(np.float64), r.contrast[:, 1].astype(np.float64)
        gain = full - bare
        rows.append(
            [gain.mean(), (gain < 0).mean(), (gain < 0.5).mean(), bare.mean(), np.minimum(gain, 0).mean(),
             ((full < -3) & (gain < 1)).mean()]
        )  # fmt: skip
    return np.asarray(rows, dtype=np.float64).reshape(len(records), len(CONTRAST_FEATURES))


class CBlock(GBlock):
    """Context contrast of the answer tokens (``ExampleRecord.contrast``), standardised on train.

    Every feature (`CONTRAST_FEATURES`) is a mean over answer tokens, so the block is affine in the
    per-token values, like the mean-pooled statistics of the other blocks (per-token scores add up).
    Config: ``features`` (the names it was fitted on; a saved block with other names is refused).
    """

    name = "C"

    def _names(self) -> tuple[str, ...]:
        return tuple(self.features) if self.features is not None else CONTRAST_FEATURES

    def _raw(self, records):
        return contrast_matrix(records)
