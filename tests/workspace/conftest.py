import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def dists(tmp_path_factory) -> Path:
    """Every package built as users get it: ``uv build --all-packages`` (sdists, and wheels from them)."""
    if shutil.which("uv") is None:
        pytest.skip("uv is not on PATH")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        ["uv", "build", "--all-packages", "--out-dir", str(out), "--quiet"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return out
