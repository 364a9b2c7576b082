import numpy as np
import pytest
import torch
from halujudge import HHEM, HHEM_PROMPT, MiniCheck, WeightsNotFoundError, chunk_document, split_sentences
from safetensors.torch import save_file

TWO_SENTENCES = "The museum opened in 1998 . Maria founded the company in 2010 ."


def _seq2seq_reference(model, tok, doc, claim):
    enc = tok(f"predict: {doc}</s>{claim}", return_tensors="pt")
    zero, one = (
        tok("0", add_special_tokens=False)["input_ids"][0],
        tok("1", add_special_tokens=False)["input_ids"][0],
    )
    with torch.no_grad():
        logits = model(**enc, decoder_input_ids=torch.tensor([[tok.pad_token_id]])).logits[0, 0].double()
    return float(torch.softmax(logits[[zero, one]], 0)[1])


def _count(tok):
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def test_minicheck_default_is_the_whole_answer_max_over_chunks(tiny_t5, tiny_tokenizer, make_example):
    # MiniCheck's own scorer and the paper (Appendix L.5): the whole claim, highest support over chunks
    checker = MiniCheck(
        tiny_t5, tiny_tokenizer, style="seq2seq", chunk_tokens=12, batch_size=3, include_question=False
    )
    assert checker.claims == "whole"
    example = make_example(2, 1, answer=TWO_SENTENCES)
    chunks = chunk_document(example.context, 12, _count(tiny_tokenizer))
    assert len(chunks) >= 3
    whole = [_seq2seq_reference(tiny_t5, tiny_tokenizer, c, example.answer.strip()) for c in chunks]
    per_sentence = [
        max(_seq2seq_reference(tiny_t5, tiny_tokenizer, c, s) for c in chunks)
        for s in split_sentences(example.answer)
    ]
    (score,) = checker.score([example], progress=False)
    assert score == pytest.approx(1 - max(whole), abs=1e-6)
    assert abs((1 - min(per_sentence)) - score) > 1e-6  # the sentence minimum is a different score


def test_minicheck_rejects_an_unknown_claim_mode(tiny_t5, tiny_tokenizer):
    with pytest.raises(ValueError, match="claims must be 'whole' or 'sentences'"):
        MiniCheck(tiny_t5, tiny_tokenizer, style="seq2seq", claims="sentence")


def test_minicheck_seq2seq_min_over_sentences_of_max_over_chunks(tiny_t5, tiny_tokenizer, make_example):
    checker = MiniCheck(
        tiny_t5, tiny_tokenizer, style="seq2seq", chunk_tokens=12, batch_size=3, include_question=False,
        claims="sentences",
    )  # fmt: skip
    example = make_example(2, 1, answer=TWO_SENTENCES)
    chunks = chunk_document(example.context, 12, _count(tiny_tokenizer))
    claims = split_sentences(example.answer)
    assert len(chunks) >= 3 and len(claims) == 2
    support = [[_seq2seq_reference(tiny_t5, tiny_tokenizer, c, s) for c in chunks] for s in claims]
    expected = 1 - min(max(row) for row in support)
    (score,) = checker.score([example], progress=False)
    assert score == pytest.approx(expected, abs=1e-6)
    assert 0 <= score <= 1


def test_minicheck_seq2seq_prepends_the_question(tiny_t5, tiny_tokenizer, make_example):
    example = make_example(0, 0)
    checker = MiniCheck(tiny_t5, tiny_tokenizer, style="seq2seq", include_question=True)
    doc = f"Question: {example.question}\n\n{example.context}"
    expected = 1 - _seq2seq_reference(tiny_t5, tiny_tokenizer, doc, example.answer)
    assert checker.score([example], progress=False)[0] == pytest.approx(expected, abs=1e-6)


def test_minicheck_causal_reads_yes_probability_with_left_padding(tiny_qwen2, tiny_tokenizer):
    checker = MiniCheck(tiny_qwen2, tiny_tokenizer, style="causal", batch_size=4)
    pairs = [
        ("The museum opened in 1998 .", "The museum opened in 1998 ."),
        ("The ferry leaves the harbour at 7 and the crossing takes 40 minutes .", "It takes 40 minutes ."),
    ]
    yes = [tiny_tokenizer.convert_tokens_to_ids("Yes"), tiny_tokenizer.convert_tokens_to_ids("yes")]
    expected = []
    for doc, claim in pairs:
        prompt = tiny_tokenizer.apply_chat_template(
            checker._messages(doc, claim), tokenize=False, add_generation_prompt=True
        )
        ids = torch.tensor([tiny_tokenizer(prompt, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            probs = torch.softmax(tiny_qwen2(input_ids=ids).logits[0, -1].double(), 0)
        expected.append(float(probs[yes].sum()))
    np.testing.assert_allclose(checker.support(pairs), expected, atol=1e-6)


def test_hhem_input_convention_and_chunking_above_the_limit(tiny_t5_classifier, tiny_tokenizer, make_example):
    example = make_example(2, 1)
    premise = f"Question: {example.question}\n\n{example.context}"

    def support(p):
        enc = tiny_tokenizer(HHEM_PROMPT.format(premise=p, hypothesis=example.answer), return_tensors="pt")
        assert enc["input_ids"][0, 0] == tiny_tokenizer.pad_token_id  # the prompt starts with <pad>
        with torch.no_grad():
            return float(torch.softmax(tiny_t5_classifier(**enc).logits[0, 0].double(), 0)[1])

    whole = HHEM(tiny_t5_classifier, tiny_tokenizer)  # 8,192 tokens: scored whole
    assert whole.score([example], progress=False)[0] == pytest.approx(1 - support(premise), abs=1e-6)
    small = HHEM(tiny_t5_classifier, tiny_tokenizer, max_tokens=40)
    overhead = len(tiny_tokenizer(HHEM_PROMPT.format(premise="", hypothesis=example.answer))["input_ids"])
    chunks = chunk_document(premise, 40 - overhead, _count(tiny_tokenizer))
    assert len(chunks) > 1
    expected = 1 - max(support(c) for c in chunks)
    assert small.score([example], progress=False)[0] == pytest.approx(expected, abs=1e-6)


def test_hhem_loads_prefixed_weights_without_remote_code(
    tiny_t5_classifier, tiny_tokenizer, make_example, tmp_path
):
    foundation = tmp_path / "flan-t5-base"
    tiny_t5_classifier.config.save_pretrained(foundation)
    tiny_tokenizer.save_pretrained(foundation)
    hhem_dir = tmp_path / "hhem"
    hhem_dir.mkdir()
    state = {f"t5.{k}": v.detach().clone().contiguous() for k, v in tiny_t5_classifier.state_dict().items()}
    save_file(state, str(hhem_dir / "model.safetensors"))
    loaded = HHEM.from_pretrained(hhem_dir, foundation)
    reference = HHEM(tiny_t5_classifier, tiny_tokenizer)
    examples = [make_example(i, i % 2) for i in range(3)]
    np.testing.assert_allclose(
        loaded.score(examples, progress=False), reference.score(examples, progress=False), atol=1e-6
    )


def test_checkers_say_what_is_missing(tmp_path):
    with pytest.raises(WeightsNotFoundError, match="vectara/hallucination_evaluation_model"):
        HHEM.from_pretrained(tmp_path / "absent", tmp_path / "flan")
    with pytest.raises(WeightsNotFoundError, match="--model DIR"):
        MiniCheck.from_pretrained(str(tmp_path / "absent"))
    with pytest.raises(ValueError, match="style must be"):
        MiniCheck(None, None, style="nli")


def test_minicheck_classifier_style(tiny_tokenizer):
    from transformers import RobertaConfig, RobertaForSequenceClassification

    torch.manual_seed(4)
    config = RobertaConfig(
        vocab_size=len(tiny_tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=600, pad_token_id=tiny_tokenizer.pad_token_id,
        num_labels=2,
    )  # fmt: skip
    model = RobertaForSequenceClassification(config).eval()
    checker = MiniCheck(model, tiny_tokenizer, style="classifier")
    pairs = [
        ("The museum opened in 1998 .", "It opened in 1998 ."),
        ("Maria founded the company .", "Diego did ."),
    ]
    expected = []
    for doc, claim in pairs:
        with torch.no_grad():
            logits = model(**tiny_tokenizer(f"{doc}</s>{claim}", return_tensors="pt")).logits[0].double()
        expected.append(float(torch.softmax(logits, 0)[1]))
    np.testing.assert_allclose(checker.support(pairs), expected, atol=1e-6)


def test_minicheck_style_is_read_from_the_saved_config(tiny_t5, tiny_llama, tiny_tokenizer, tmp_path):
    for name, model, style in (("t5", tiny_t5, "seq2seq"), ("llama", tiny_llama, "causal")):
        model.save_pretrained(tmp_path / name)
        tiny_tokenizer.save_pretrained(tmp_path / name)
        checker = MiniCheck.from_pretrained(str(tmp_path / name))
        assert checker.style == style and checker.model_id == str(tmp_path / name)


def test_checker_cache_resumes_and_tracks_settings(
    tiny_t5_classifier, tiny_tokenizer, make_example, tmp_path
):
    from halujudge import ScoreCache

    examples = [make_example(i, i % 2) for i in range(3)]
    whole = HHEM(tiny_t5_classifier, tiny_tokenizer)
    first = whole.score(examples, cache=ScoreCache(tmp_path / "c.jsonl"), progress=False)
    calls = []
    hook = tiny_t5_classifier.register_forward_hook(lambda *a: calls.append(1))
    try:
        again = whole.score(examples, cache=ScoreCache(tmp_path / "c.jsonl"), progress=False)
        assert not calls  # every score came from the cache
        chunked = HHEM(tiny_t5_classifier, tiny_tokenizer, max_tokens=40)
        chunked.score(examples[2:], cache=ScoreCache(tmp_path / "c.jsonl"), progress=False)
        assert calls  # other chunking, other key: scored again
    finally:
        hook.remove()
    np.testing.assert_array_equal(first, again)
