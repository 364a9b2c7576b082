"""The page at ``/`` in headless Chromium (Debian's ``chromium``): fill, submit, see the highlighted spans."""

from __future__ import annotations

import base64
import json
import shutil

import pytest

from .conftest import Browser, tiny_detector  # noqa: TID252

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
@pytest.mark.parametrize(
    "answer",
    [
        "w1 w40 w41 w42 w43 w2 w44 w45",
        # emoji are two UTF-16 units each: the page must slice the server's code-point offsets as such
        "w1 \U0001f600 w40 w41 \U0001f600\U0001f600 w42 w43 w2 w44 w45",
    ],
    ids=["ascii", "astral"],
)
def test_page_scores_and_highlights_spans(serve, tmp_path, answer):
    detector = tiny_detector(astral=True)
    context = "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12"
    with serve(detector) as (url, _, _):
        want = detector.predict_text(context, "w3", answer)
        assert want.spans  # the page has something to highlight
        if not answer.isascii():  # a span starts after an emoji, where code points and UTF-16 differ
            assert any(not answer[: s.start].isascii() for s in want.spans)
        browser = Browser(CHROMIUM, tmp_path / "profile")
        try:
            browser.call("Page.enable")
            browser.call("Page.navigate", url=f"{url}/")
            browser.wait_for("document.readyState === 'complete' && !!document.getElementById('form')")
            fill = {"context": context, "question": "w3", "answer": answer}
            browser.js(
                f"const v = {json.dumps(fill)}; for (const k in v) document.getElementById(k).value = v[k];"
                "document.getElementById('submit').click(); true"
            )
            browser.wait_for("!document.getElementById('result').hidden")
            shown = browser.js(
                "({p: Number(document.getElementById('verdict').dataset.probability),"
                " verdict: document.getElementById('verdict').textContent,"
                " text: [...document.getElementById('answer-view').childNodes].map("
                "   n => n.nodeType === 3 ? n.textContent : n.firstChild.textContent).join(''),"
                " marks: [...document.querySelectorAll('#answer-view mark')].map("
                "   m => [m.firstChild.textContent, Number(m.dataset.confidence)])})"
            )
            png = base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"])
        finally:
            browser.close()
    (tmp_path / "serve.png").write_bytes(png)  # pytest keeps the last runs' tmp_path: look at it
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert shown["p"] == pytest.approx(want.probability, abs=1e-5)
    assert ("hallucinated" if want.label else "supported") in shown["verdict"]
    assert [m[0] for m in shown["marks"]] == [answer[s.start : s.end] for s in want.spans]
    assert all(0 <= m[1] <= 1 for m in shown["marks"])
    assert shown["text"] == answer
