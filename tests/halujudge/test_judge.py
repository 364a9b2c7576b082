import numpy as np
import pytest
import torch
from halujudge import (
    LLMJudge,
    ScoreCache,
    WeightsNotFoundError,
    apply_chat,
    load_template,
    render_messages,
    verdict_token_ids,
)


def _reference_score(judge: LLMJudge, example) -> float:
    """P(True) over {True, False} from one unpadded forward, in float64."""
    ids = judge.tokenizer(
        judge.prompt(example.context, example.question, example.answer), add_special_tokens=False
    )
    with torch.no_grad():
        logits = judge.model(input_ids=torch.tensor([ids["input_ids"]])).logits[0, -1].double()
    pair = logits[[judge.tokens.true_id, judge.tokens.false_id]]
    return float(torch.softmax(pair, 0)[0])


def test_verdict_tokens_follow_the_assistant_opener(tiny_tokenizer):
    prompt = apply_chat(tiny_tokenizer, render_messages(load_template("plain"), "c", "q", "a"))
    assert prompt.endswith("<|assistant|>\n")
    tokens = verdict_token_ids(tiny_tokenizer, prompt)
    assert tokens.true_id == tiny_tokenizer.convert_tokens_to_ids("True")
    assert tokens.false_id == tiny_tokenizer.convert_tokens_to_ids("False")
    assert (tokens.true_token, tokens.false_token) == ("True", "False")


@pytest.mark.parametrize("batch_size", [1, 2, 5])
def test_scores_match_an_unpadded_reference(tiny_qwen2, tiny_tokenizer, make_example, batch_size):
    judge = LLMJudge(tiny_qwen2, tiny_tokenizer, "claims", model_id="tiny", batch_size=batch_size)
    examples = [make_example(i, i % 2) for i in range(5)]  # contexts of three different lengths
    scores = judge.score(examples, progress=False)
    expected = [_reference_score(judge, e) for e in examples]
    assert scores.dtype == np.float64 and np.all((scores > 0) & (scores < 1))
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-5)


def test_interrupted_run_resumes_from_the_cache(tiny_qwen2, tiny_tokenizer, make_example, tmp_path):
    judge = LLMJudge(tiny_qwen2, tiny_tokenizer, "strict", model_id="tiny", batch_size=2)
    examples = [make_example(i, i % 2) for i in range(6)]
    first = judge.score(examples[:4], cache=ScoreCache(tmp_path / "c.jsonl"), progress=False)
    seen = []
    hook = tiny_qwen2.register_forward_hook(
        lambda m, args, kwargs, out: seen.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        resumed = judge.score(examples, cache=ScoreCache(tmp_path / "c.jsonl"), progress=False)
    finally:
        hook.remove()
    assert sum(seen) == 2  # only the two new examples were run
    np.testing.assert_array_equal(resumed[:4], first)
    # Another template is another cache key: nothing is reused.
    other = judge.with_template("plain").score(
        examples[:1], cache=ScoreCache(tmp_path / "c.jsonl"), progress=False
    )
    assert other[0] != pytest.approx(resumed[0], abs=1e-9)


def test_judge_rejects_bad_arguments(tiny_qwen2, tiny_tokenizer):
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        LLMJudge(tiny_qwen2, tiny_tokenizer, "plain", batch_size=0)
    with pytest.raises(ValueError, match="unknown judge template"):
        LLMJudge(tiny_qwen2, tiny_tokenizer, "loose")


def test_missing_weights_say_how_to_provide_them(tmp_path):
    with pytest.raises(WeightsNotFoundError, match="pass it with --model DIR") as err:
        LLMJudge.from_pretrained(str(tmp_path / "no-such-model"))
    assert "does not exist" in str(err.value)


def test_chat_fallbacks(tiny_tokenizer):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    no_system = tiny_tokenizer.__class__(tokenizer_object=tiny_tokenizer.backend_tokenizer)
    no_system.chat_template = (
        "{% for m in messages %}"
        "{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}"
        "<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}<|assistant|>\n"
    )
    assert (
        apply_chat(no_system, messages) == "<|user|>\nS\n\nU</s>\n<|assistant|>"
    )  # jinja drops the final newline
    no_system.chat_template = None
    assert apply_chat(no_system, messages) == "S\n\nU\n\n"
