"""Text-only grounding signals: hand-made values, invariances, label conventions."""

import json
import math

import numpy as np
import pytest
from halubench_data import (
    GROUNDING_FEATURES,
    answer_words,
    auroc,
    build_ragtruth,
    grounding_features,
    overlap_score,
    unsupported_char_spans,
)
from halubench_data.builders import claim_example

CTX = "Marie Curie won the Nobel Prize in Physics in 1903, together with Pierre Curie."
FEATURE = {name: i for i, name in enumerate(GROUNDING_FEATURES)}


def test_overlap_score_counts_unsupported_content_words():
    # content words: marie, curie, won, nobel, prize, chemistry, 1911 -> chemistry and 1911 unsupported
    assert overlap_score(CTX, "", "Marie Curie won the Nobel Prize in Chemistry in 1911.") == pytest.approx(
        2 / 7
    )
    assert overlap_score(CTX, "", "Marie Curie won the Nobel Prize in Physics.") == 0.0
    assert overlap_score("", "", "Lovelace wrote programs.") == 1.0
    assert overlap_score(CTX, "", "Yes, it was.") == 0.0  # stop words only: nothing to check


def test_question_counts_as_context():
    q = "Which element did Curie discover with polonium?"
    assert overlap_score(CTX, "", "Polonium.") == 1.0
    assert overlap_score(CTX, q, "Polonium.") == 0.0


def test_case_punctuation_plural_and_number_format_do_not_matter():
    a = "Marie Curie won the Nobel Prize in Physics in 1903."
    variants = [
        a.upper(),
        a.lower(),
        a.replace(" ", "  ").replace(".", "!!"),
        "MARIE-CURIE; won: nobel (prize) physics, 1903",
    ]
    for v in variants:
        assert overlap_score(CTX, "", v) == 0.0
        np.testing.assert_array_equal(
            grounding_features(CTX, "", v)[
                [FEATURE["unsupported_word_share"], FEATURE["unsupported_number_share"]]
            ],
            0.0,
        )
    assert overlap_score("It cost 1,200,000 dollars.", "", "It cost 1200000 dollar.") == 0.0
    assert overlap_score("ＡＢＣ holds ４２ votes", "", "abc holds 42 vote") == 0.0  # NFKC: full-width forms


def test_features_hand_made():
    f = grounding_features(
        CTX, "", "Marie Curie won the Nobel Prize in Chemistry in 1911 with Albert Einstein."
    )
    assert f.shape == (len(GROUNDING_FEATURES),) and f.dtype == np.float64
    # content: marie curie won nobel prize chemistry 1911 albert einstein -> 4 of 9 unsupported
    assert f[FEATURE["unsupported_word_share"]] == pytest.approx(4 / 9)
    assert f[FEATURE["unsupported_number_share"]] == 1.0
    assert f[FEATURE["log_unsupported_numbers"]] == pytest.approx(math.log(2))
    # entity-like (capitalised, not first in sentence): curie nobel prize chemistry albert einstein
    assert f[FEATURE["unsupported_entity_share"]] == pytest.approx(3 / 6)
    # chemistry 1911 albert einstein: consecutive content words (stop words between do not break a run)
    assert f[FEATURE["longest_unsupported_run"]] == pytest.approx(4 / 9)
    g = grounding_features(CTX, "", "Chemistry in 1911, Marie Curie won with Albert Einstein.")
    assert g[FEATURE["longest_unsupported_run"]] == pytest.approx(2 / 7)  # a supported word breaks it
    assert f[FEATURE["low_support_sentence_share"]] == 0.0  # one sentence, 4/9 < 1/2
    assert f[FEATURE["max_sentence_unsupported_share"]] == pytest.approx(4 / 9)
    assert f[FEATURE["log_answer_words"]] == pytest.approx(math.log1p(13))
    assert f[FEATURE["log_answer_context_ratio"]] == pytest.approx(math.log(14 / 15))
    # 12 answer bigrams; in the context: marie curie, curie won, won the, the nobel, nobel prize, prize in
    assert f[FEATURE["unsupported_bigram_share"]] == pytest.approx(6 / 12)


def test_sentence_support_and_number_share():
    ans = "Marie Curie won the Nobel Prize. Lovelace invented calculus in 1840 and 1903."
    f = grounding_features(CTX, "", ans)
    assert f[FEATURE["low_support_sentence_share"]] == 0.5  # second sentence: 4 of 5 unsupported
    assert f[FEATURE["max_sentence_unsupported_share"]] == pytest.approx(4 / 5)
    assert f[FEATURE["unsupported_number_share"]] == 0.5


def test_any_script_and_empty_pieces():
    f = grounding_features("", "", "北京是中国的首都。")
    assert np.all(np.isfinite(f)) and f[FEATURE["unsupported_word_share"]] == 1.0
    assert overlap_score("北京是中国的首都", "", "北京是首都") == 0.0
    assert overlap_score("Москва — столица России.", "", "Столица России — Москва") == 0.0
    assert np.all(np.isfinite(grounding_features("", "", "!!!")))
    for bad in ("", "  \n"):
        with pytest.raises(ValueError, match="answer is empty"):
            grounding_features(CTX, "", bad)
        with pytest.raises(ValueError, match="answer is empty"):
            overlap_score(CTX, "", bad)
    with pytest.raises(TypeError, match="context must be a str"):
        overlap_score(None, "", "x")  # type: ignore[arg-type]


def test_unsupported_char_spans_cover_invented_words_only():
    ans = "Marie Curie won it in Chemistry and Biology in 1911. Pierre Curie helped. Einstein too."
    spans = unsupported_char_spans(CTX, "", ans)
    assert [ans[s:e] for s, e in spans] == ["Chemistry and Biology in 1911", "helped", "Einstein"]
    assert unsupported_char_spans(CTX, "", "Marie Curie won.") == []
    words = answer_words(CTX, "", ans)
    assert all(ans[w.start : w.end].casefold().startswith(w.key[:3]) for w in words)


def test_first_feature_is_the_overlap_score():
    for ans in ("Marie Curie won in 1911.", "Yes.", "Lovelace, Babbage and Curie met."):
        assert grounding_features(CTX, "q", ans)[FEATURE["unsupported_word_share"]] == overlap_score(
            CTX, "q", ans
        )


def test_deterministic():
    a = "Pierre Curie won the Prize in 1911, in Chemistry."
    np.testing.assert_array_equal(grounding_features(CTX, "q", a), grounding_features(CTX, "q", a))


def test_label_conventions_claims_and_ragtruth(tmp_path):
    # claim sources: their label 1 = the document supports the claim = our label 0
    row = {"doc": CTX, "question": "Who won?", "question_id": 7}
    supported = claim_example("lfqa", {**row, "claim": "Marie Curie won the Nobel Prize.", "label": 1}, "a")
    invented = claim_example("lfqa", {**row, "claim": "Ada Lovelace won a Turing Award.", "label": 0}, "b")
    assert (supported.label, invented.label) == (0, 1)
    scores = [overlap_score(e.context, e.question, e.answer) for e in (supported, invented)]
    assert auroc(scores, [supported.label, invented.label]) == 1.0
    # RAGTruth: a response is hallucinated when it has an annotated span; the floor's spans find it
    answer = "Curie won the Nobel Prize in 1903 and the Fields Medal."
    start = answer.index("Fields")
    source = {"question": "What did Curie win?", "passages": f"passage 1:{CTX}"}
    end = len(answer) - 1
    span = {"start": start, "end": end, "text": answer[start:end], "label_type": "Subtle Baseless Info"}
    resp = [
        {"response": "Curie won the Nobel Prize in 1903.", "model": "m", "labels": []},
        {"response": answer, "model": "m", "labels": [span]},
    ]
    (tmp_path / "ragtruth_qa.jsonl").write_text(
        json.dumps({"source_id": 1, "source": source, "responses": resp}) + "\n"
    )
    ds = build_ragtruth(tmp_path)
    by_label = {e.label: e for e in ds}
    assert overlap_score(by_label[0].context, by_label[0].question, by_label[0].answer) == 0.0
    hal = by_label[1]
    assert unsupported_char_spans(hal.context, hal.question, hal.answer) == [(start, len(answer) - 1)]
    assert (hal.spans[0].start, hal.spans[0].end) == (start, len(answer) - 1)
