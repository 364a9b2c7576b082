"""Built sdists and wheels: the kernels wheel requires torch and triton only; each one ships the licence."""

import re
import tarfile
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


def test_kernels_wheel_requires_only_torch_and_triton(dists):
    (wheel,) = dists.glob("flashstats_kernels-*.whl")
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


PACKAGES = ["flashstats_kernels", "flashstats_hf", "halluprobe", "halujudge", "halubench_data"]


@pytest.mark.parametrize("name", PACKAGES)
def test_licence_is_in_every_sdist_and_wheel(dists, name):
    licence = (ROOT / "LICENSE").read_bytes()
    (wheel,) = dists.glob(f"{name}-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (entry,) = [n for n in zf.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert zf.read(entry) == licence
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta and "License-File: LICENSE" in meta
    assert "Project-URL: Repository, https://" in meta
    (sdist,) = dists.glob(f"{name}-*.tar.gz")
    with tarfile.open(sdist) as tf:
        top = tf.getnames()[0].split("/")[0]
        member = tf.extractfile(f"{top}/LICENSE")
        assert member is not None and member.read() == licence
        assert f"{top}/CHANGELOG.md" in tf.getnames()
