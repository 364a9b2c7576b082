"""A fine-tuning's hyperparameters (no torch import, so a command checks them before anything loads)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["DEFAULT_TARGETS", "POOLS", "AdapterSpec", "ReaderSettings"]

DEFAULT_TARGETS: tuple[str, ...] = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
"""Linear layers that get adapters (the attention and MLP projections of Llama-style decoders)."""
POOLS: tuple[str, ...] = ("max", "noisy-or", "mean")
"""How token logits become an answer logit (`pool_logits`)."""


@dataclass(frozen=True)
class AdapterSpec:
    """The shape of a reader's adapters: what a saved reader promises about its proxy."""

    rank: int
    """Rank ``r`` of every adapter."""
    alpha: int
    """peft's ``lora_alpha``: the update is ``(alpha / r) * B @ A``."""
    targets: tuple[str, ...]
    """Names of the adapted linear layers (last component of the module path)."""

    def check(self) -> None:
        """ValueError naming the field when the spec cannot describe an adapter."""
        if not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"adapter rank must be an integer >= 1, got {self.rank!r}")
        if not (
            isinstance(self.alpha, int) and not isinstance(self.alpha, bool) and 0 < self.alpha < 1 << 20
        ):
            raise ValueError(f"adapter alpha must be a positive integer, got {self.alpha!r}")
        if not self.targets or not all(isinstance(t, str) and t for t in self.targets):
            raise ValueError(f"adapter targets must be non-empty module names, got {self.targets!r}")


@dataclass(frozen=True)
class ReaderSettings:
    """Hyperparameters of a fine-tuning (defaults: those the packaged reader was trained with)."""

    rank: int = 8
    """Rank of every adapter."""
    alpha: int = 16
    """peft's ``lora_alpha`` (the update is scaled by ``alpha / rank``)."""
    dropout: float = 0.05
    """Dropout on the adapters' input while training."""
    targets: tuple[str, ...] = DEFAULT_TARGETS
    """Adapted linear layers."""
    learning_rate: float = 4e-4
    """AdamW learning rate of the adapters."""
    head_learning_rate: float = 1e-3
    """AdamW learning rate of the token head."""
    epochs: float = 2.0
    """Most passes over the training answers."""
    max_batch_tokens: int = 16384
    """Most padded tokens in one batch (rows sorted by length)."""
    pool: str = "max"
    """Pooling of the example loss (`POOLS`)."""
    token_weight: float = 1.0
    """Weight of the token loss beside the example loss."""
    evals_per_epoch: int = 2
    """Validation evaluations per epoch."""
    patience: int = 2
    """Evaluations without improvement before training stops."""
    warmup: float = 0.05
    """Share of the steps over which the learning rate rises linearly (then it falls linearly to 0)."""
    seed: int = 0
    """Seed of the adapters' initialisation, the dropout and the batch order."""

    def check(self) -> None:
        """ValueError naming the first setting out of range."""
        rules = {
            "rank": self.rank >= 1,
            "alpha": self.alpha > 0,
            "dropout": 0 <= self.dropout < 1,
            "learning_rate": self.learning_rate > 0,
            "head_learning_rate": self.head_learning_rate > 0,
            "epochs": 0 < self.epochs <= 100,
            "max_batch_tokens": self.max_batch_tokens >= 1,
            "pool": self.pool in POOLS,
            "token_weight": self.token_weight >= 0,
            "evals_per_epoch": self.evals_per_epoch >= 1,
            "patience": self.patience >= 1,
            "warmup": 0 <= self.warmup < 1,
        }
        for name, ok in rules.items():
            if not ok:
                raise ValueError(f"reader setting {name} = {getattr(self, name)!r} is out of range")

    @property
    def adapter(self) -> AdapterSpec:
        """The adapters' shape."""
        return AdapterSpec(int(self.rank), int(self.alpha), tuple(self.targets))

    def as_dict(self) -> dict:
        """JSON-ready settings (for the card)."""
        d = asdict(self)
        d["targets"] = list(self.targets)
        return d
