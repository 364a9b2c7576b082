"""The packaged detector's transfer table is rendered from a transfer CSV into its marked block."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str = "transfer_table"):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CSV = """source,method,kind,auroc,f1
qa,general,detector,0.80,0.7
qa,overlap,floor,0.70,0.6
qa,tfidf,floor,0.72,0.5
summary,general,detector,0.60,0.5
summary,overlap,floor,0.65,0.4
summary,tfidf,floor,,0.4
"""


def test_table_has_the_best_floor_and_each_detectors_difference(tmp_path):
    script = _script()
    path = tmp_path / "transfer.csv"
    path.write_text(CSV)
    table = script.render(script.read_rows(path))
    lines = table.strip().splitlines()
    assert lines[0] == "| held-out source | general | overlap | tfidf | best floor | general − floor |"
    assert lines[2] == "| qa | 0.800 | 0.700 | 0.720 | 0.720 | +0.080 |"
    assert lines[3] == "| summary | 0.600 | 0.650 | — | 0.650 | -0.050 |"  # a missing floor is skipped
    assert lines[4] == "| **mean** | 0.700 | 0.675 | 0.720 | 0.685 | +0.015 |"
    (tmp_path / "bad.csv").write_text("source,method\nqa,general\n")
    with pytest.raises(ValueError, match=r"lacks \['kind', 'auroc'\]"):
        script.read_rows(tmp_path / "bad.csv")


def test_the_page_block_is_replaced_and_nothing_else():
    script = _script()
    page = script.PAGE.read_text()
    new = script.replace_block(page, "| t |\n")
    assert new.split(script.START)[0] == page.split(script.START)[0]
    assert new.split(script.END)[1] == page.split(script.END)[1]
    assert f"{script.START}\n| t |\n{script.END}" in new
    with pytest.raises(ValueError, match="needs one"):
        script.replace_block("no markers", "| t |\n")


def test_the_transfer_page_holds_the_recorded_run_verbatim():
    script = _script("transfer_page")
    page = script.PAGE.read_text(encoding="utf-8")
    recorded = (script.RUN / "transfer.md").read_text(encoding="utf-8")
    assert script.render(page, recorded) == page  # regenerate with docs/scripts/transfer_page.py
    assert "| overlap floor | floor |" in page and "SmolLM2 judge" in page
    assert script.IMAGE.read_bytes() == (script.RUN / "reliability.png").read_bytes()
    with pytest.raises(ValueError, match="lacks the markers"):
        script.render("no markers here", recorded)


def test_the_transfer_page_holds_the_recorded_reader_run_verbatim():
    script = _script("transfer_page")
    page = script.PAGE.read_text(encoding="utf-8")
    recorded = (script.READER_RUN / "transfer.md").read_text(encoding="utf-8")
    assert script.render(page, recorded, script.READER_START, script.READER_END) == page
    block = page.split(script.READER_START)[1].split(script.READER_END)[0]
    assert "| O+reader | reader |" in block and "| overlap floor | floor |" in block
