import pytest
from halujudge import chunk_document, split_sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One. Two! Three?", ["One.", "Two!", "Three?"]),
        (
            "Dr. Smith paid $3.50 at 5 p.m. on Monday. Then he left.",
            ["Dr. Smith paid $3.50 at 5 p.m. on Monday.", "Then he left."],
        ),
        (
            "J. R. R. Tolkien wrote it. See example.com for more.",
            ["J. R. R. Tolkien wrote it.", "See example.com for more."],
        ),
        ('He said "Stop." She did.', ['He said "Stop."', "She did."]),
        ("Items:\n1. First thing\n2. Second thing", ["Items:", "1. First thing", "2. Second thing"]),
        ("No end punctuation", ["No end punctuation"]),
        ("It rose (by 5%.) Then fell.", ["It rose (by 5%.)", "Then fell."]),
        ("   \n\n ", []),
    ],
    ids=["basic", "abbrev-decimal", "initials-url", "quote", "list-lines", "no-period", "bracket", "blank"],
)
def test_split_sentences(text, expected):
    assert split_sentences(text) == expected


def test_split_sentences_rejects_non_strings():
    with pytest.raises(TypeError, match="text must be a str"):
        split_sentences(b"bytes")


def _words(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize("budget", [1, 3, 7, 12, 1000])
def test_chunks_fit_the_budget_and_keep_every_word_in_order(budget):
    doc = (
        "Alpha beta gamma. Delta epsilon. " * 5
        + "A very long sentence with eleven words in it right here now."
    )
    chunks = chunk_document(doc, budget, _words)
    assert all(_words(c) <= budget for c in chunks)
    assert " ".join(chunks).split() == doc.split()
    if _words(doc) <= budget:
        assert chunks == [doc]
    else:
        assert len(chunks) >= _words(doc) / budget


def test_chunks_keep_sentences_whole_when_they_fit():
    doc = "One two three. Four five six. Seven eight nine."
    assert chunk_document(doc, 6, _words) == ["One two three. Four five six.", "Seven eight nine."]


def test_chunk_budget_must_be_positive():
    with pytest.raises(ValueError, match="max_tokens must be a positive int"):
        chunk_document("text", 0, _words)
