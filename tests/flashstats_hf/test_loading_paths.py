"""Where dequantised models are cached: the platform's conventions, overridable."""

from pathlib import Path

import pytest
from flashstats_hf import loading


@pytest.fixture
def home(tmp_path, monkeypatch):
    for var in ("FLASHSTATS_CACHE", "XDG_CACHE_HOME", "LOCALAPPDATA"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.parametrize(
    ("platform", "expected"),
    [
        ("linux", ".cache/flashstats"),
        ("darwin", "Library/Caches/flashstats"),
        ("win32", "AppData/Local/flashstats/Cache"),
    ],
)
def test_platform_default(home, monkeypatch, platform, expected):
    monkeypatch.setattr(loading.sys, "platform", platform)
    assert loading.cache_root() == home / expected


def test_windows_reads_localappdata(home, monkeypatch, tmp_path):
    monkeypatch.setattr(loading.sys, "platform", "win32")
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    assert loading.cache_root() == tmp_path / "local" / "flashstats" / "Cache"


@pytest.mark.parametrize("platform", ["linux", "darwin", "win32"])
def test_xdg_cache_home_wins_over_the_platform_default(home, monkeypatch, tmp_path, platform):
    monkeypatch.setattr(loading.sys, "platform", platform)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert loading.cache_root() == tmp_path / "xdg" / "flashstats"


def test_relative_xdg_cache_home_is_ignored(home, monkeypatch):
    monkeypatch.setattr(loading.sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert loading.cache_root() == home / ".cache" / "flashstats"


def test_explicit_folder_and_variable_come_first(home, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("FLASHSTATS_CACHE", str(tmp_path / "mine"))
    assert loading.cache_root() == tmp_path / "mine"
    assert loading.cache_root(tmp_path / "given") == tmp_path / "given"
