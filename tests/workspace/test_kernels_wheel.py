"""``uv build --package flashstats-kernels`` yields a wheel that requires torch and triton only."""

import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOWED_REQUIREMENTS = {"torch", "triton", "numpy"}


def wheel_requirements(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = zf.read(meta_name).decode()
    reqs = set()
    for line in meta.splitlines():
        if line.startswith("Requires-Dist:"):
            spec = line.split(":", 1)[1].strip()
            if "extra ==" in spec:
                continue
            reqs.add(re.split(r"[\s;<>=!~\[(]", spec, maxsplit=1)[0].lower())
    return reqs


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
def test_kernels_wheel_requires_only_torch_and_triton(tmp_path):
    subprocess.run(
        ["uv", "build", "--package", "flashstats-kernels", "--wheel", "--out-dir", str(tmp_path), "--quiet"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("flashstats_kernels-*.whl")
    reqs = wheel_requirements(wheel)
    assert {"torch", "triton"} <= reqs
    assert reqs <= ALLOWED_REQUIREMENTS, f"unexpected requirements: {reqs - ALLOWED_REQUIREMENTS}"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert "flashstats_kernels/py.typed" in names
    assert "flashstats_kernels/types.py" in names


def test_requirement_parser_sees_a_third_party_requirement(tmp_path):
    wheel = tmp_path / "x-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(
            "x-0.1.dist-info/METADATA",
            "Name: x\nRequires-Dist: torch>=2.4\nRequires-Dist: transformers>=5; python_version>'3'\n"
            "Requires-Dist: pytest; extra == 'test'\n",
        )
    assert wheel_requirements(wheel) == {"torch", "transformers"}
