"""Publishing basics of the five packages: licence, one version source, metadata, links, cache folder."""

import ast
import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "flashstats-kernels": "flashstats_kernels",
    "flashstats-hf": "flashstats_hf",
    "halluprobe": "halluprobe",
    "halujudge": "halujudge",
    "halubench-data": "halubench_data",
}
REPO = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flashstats"]["repository"]
"""The one definition of the repository address; everything that names it is checked against it."""


def pyproject(pkg: str) -> dict:
    return tomllib.loads((ROOT / "packages" / pkg / "pyproject.toml").read_text())


def test_root_licence_is_the_apache_2_text():
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n")
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(text) > 10_000  # the full text, not a pointer to it


@pytest.mark.parametrize("pkg", sorted(PACKAGES))
def test_package_ships_the_root_licence(pkg):
    project = pyproject(pkg)["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    assert (ROOT / "packages" / pkg / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()


@pytest.mark.parametrize("pkg", sorted(PACKAGES))
def test_version_has_one_source(pkg):
    data = pyproject(pkg)
    assert "version" not in data["project"] and data["project"]["dynamic"] == ["version"]
    init = ROOT / "packages" / pkg / "src" / PACKAGES[pkg] / "__init__.py"
    assert data["tool"]["hatch"]["version"]["path"] == f"src/{PACKAGES[pkg]}/__init__.py"
    written = [
        p.relative_to(ROOT)
        for p in (ROOT / "packages" / pkg / "src").rglob("*.py")
        if re.search(r"^__version__\s*=", p.read_text(), re.M)
    ]
    assert written == [init.relative_to(ROOT)], f"__version__ written in {written}"
    assignments = [
        node.value.value
        for node in ast.parse(init.read_text()).body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
        and isinstance(node.value, ast.Constant)
    ]
    assert len(assignments) == 1
    assert metadata.version(pkg) == assignments[0]  # the installed metadata reads the same file


@pytest.mark.parametrize("pkg", sorted(PACKAGES))
def test_metadata_for_a_package_index(pkg):
    project = pyproject(pkg)["project"]
    urls = project["urls"]
    assert {"Homepage", "Repository", "Issues", "Changelog"} <= set(urls)
    assert all(u.startswith(REPO) for u in urls.values())
    assert urls["Changelog"] == f"{REPO}/blob/main/packages/{pkg}/CHANGELOG.md"
    classifiers = project["classifiers"]
    assert "Typing :: Typed" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # the SPDX expression says it
    assert any(c.startswith("Programming Language :: Python :: 3.") for c in classifiers)
    changelog = (ROOT / "packages" / pkg / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(metadata.version(pkg))}\]", changelog, re.M)


LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("pkg", sorted(PACKAGES))
def test_readme_links_work_on_a_package_index(pkg):
    """Every link of a package README is absolute; links into this repository name files that exist."""
    readme = (ROOT / "packages" / pkg / "README.md").read_text()
    for url in LINK.findall(readme):
        assert url.startswith(("https://", "http://")), f"relative link {url!r} in {pkg}/README.md"
        for prefix in (f"{REPO}/blob/main/", f"{REPO}/tree/main/"):
            if url.startswith(prefix):
                path = url[len(prefix) :].split("#")[0]
                assert (ROOT / path).exists(), f"{pkg}/README.md links to missing {path}"


def test_link_pattern_sees_relative_links():
    assert LINK.findall("see [a](docs/x.md) and [b](https://x.org/y)") == ["docs/x.md", "https://x.org/y"]


def test_every_repository_address_is_the_defined_one():
    """mkdocs' repo_url and every link to the repository's owner use the address of the root pyproject."""
    assert re.search(rf"^repo_url: {re.escape(REPO)}$", (ROOT / "mkdocs.yml").read_text(), re.M)
    owner = REPO.rsplit("/", 1)[0] + "/"
    files = [ROOT / "README.md", ROOT / "mkdocs.yml", *ROOT.glob("packages/*/README.md")]
    files += [*ROOT.glob("packages/*/pyproject.toml"), *ROOT.glob("docs/**/*.md")]
    for path in files:
        for url in re.findall(rf"{re.escape(owner)}[^\s\"')\]>]*", path.read_text()):
            assert url == REPO or url.startswith(REPO + "/"), f"{path.relative_to(ROOT)}: {url}"
