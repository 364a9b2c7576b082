"""CachedRecorder: statistics of generated or streamed answers equal record_forward on the same ids.

Tiny random models of each family (Llama, Qwen3, sliding-window Qwen3 / Mistral / Gemma 3, soft-capped
Gemma 2), left-padded batches with sink positions counted from each example's first real token.
Statistics: 1e-5 absolute plus 1e-5 relative in fp32. Hidden states: 1e-4, because the model's own
fp32 matmuls round differently on a 1-row step than on a whole sequence and these tiny models
(initializer range 0.3) have residual streams of tens with cancellations. The same runs in float64
agree to 1e-6 everywhere (float32 outputs), which shows that the cached path itself is exact.
"""

from __future__ import annotations

import pytest
import torch
from flashstats_hf import LOGIT_STAT_NAMES, CachedRecorder, GraphedDecodeStep, record_forward
from flashstats_kernels import StatsRequest, decode_attention
from transformers import DynamicCache, GenerationConfig, StaticCache

ROW_FIELDS = ("entropy", "normalized_entropy", "prompt_mass", "max_weight", "effective_support")
LOOKUP_FIELDS = ("diag_log", "prev_weight", "sink_weights")
TOL = dict(atol=1e-5, rtol=1e-5)
HIDDEN_TOL = dict(atol=1e-4, rtol=1e-4)
REQUEST = StatsRequest(rows=True, lookups=True, columns=True, sink_positions=(0, 2))
HIDDEN = [0, 1, -1]


def assert_same_stats(got, ref, tol=TOL, hidden_tol=HIDDEN_TOL):
    """Every field of two ForwardStats of the same answers."""
    assert got.layers == ref.layers
    assert torch.equal(got.answer_len, ref.answer_len) and torch.equal(got.prompt_len, ref.prompt_len)
    assert torch.equal(got.key_mask, ref.key_mask)
    for name in ROW_FIELDS:
        torch.testing.assert_close(getattr(got.rows, name), getattr(ref.rows, name), **tol, msg=name)
    for name in LOOKUP_FIELDS:
        torch.testing.assert_close(getattr(got.lookups, name), getattr(ref.lookups, name), **tol, msg=name)
    torch.testing.assert_close(got.columns.sum, ref.columns.sum, **tol)
    torch.testing.assert_close(got.columns.mean, ref.columns.mean, **tol)
    assert got.logit_stat_names == ref.logit_stat_names
    torch.testing.assert_close(got.logit_stats, ref.logit_stats, **tol)
    assert got.hidden_layers == ref.hidden_layers
    torch.testing.assert_close(got.hidden, ref.hidden, **hidden_tol)


def _reference(model, ids, mask, prompt_len):
    start = torch.full((ids.shape[0],), prompt_len)
    return record_forward(
        model,
        ids,
        response_start=start,
        attention_mask=mask,
        request=REQUEST,
        hidden_layers=HIDDEN,
        full_columns=True,
    )


FAMILIES = ["llama", "qwen3", "qwen3_sliding", "gemma2", "gemma3", "mistral"]


@pytest.mark.parametrize(
    "dtype", [torch.float32, pytest.param(torch.float64, marks=pytest.mark.slow)], ids=["fp32", "fp64"]
)
@pytest.mark.parametrize(
    ("kind", "chunks"),
    [
        pytest.param(kind, chunks, id=f"{kind}-{name}", marks=pytest.mark.slow if slow else ())
        for kind in FAMILIES
        for chunks, name, slow in (
            # several chunks per family in the full run, llama in the default one
            ((1, 3, 2), "chunks-1-3-2", kind != "llama"),
            ((6,), "one-chunk", False),
        )
    ],
)
def test_streamed_chunks_equal_record_forward(helpers, kind, chunks, dtype):
    model, _ = helpers.tiny_models(kind)
    model = model.to(dtype)
    ids, mask, _ = helpers.padded_batch([15, 11], [6, 6])
    prompt = 9
    rec = CachedRecorder(model, prompt_len=prompt, request=REQUEST, hidden_layers=HIDDEN)
    seen = []
    with rec:
        rec.feed(ids[:, :prompt], attention_mask=mask[:, :prompt])
        at = prompt
        for n in chunks:
            rec.feed(ids[:, at : at + n])
            at += n
            seen.append((at, rec.stats()))
    exact = dict(atol=1e-6, rtol=1e-6)
    for at, got in seen:  # after every chunk: the statistics of the answer so far
        ref = _reference(model, ids[:, :at], mask[:, :at], prompt)
        assert_same_stats(got, ref, *((exact, exact) if dtype == torch.float64 else (TOL, HIDDEN_TOL)))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", FAMILIES)
def test_streamed_chunks_on_the_gpu_equal_record_forward(helpers, kind):
    """Every family (sliding-window, soft-capped) on the Triton kernels, fed in chunks on a DynamicCache.

    Left-padded batch, sinks per example; bound: the GPU bound of the recorded forward (3e-3, TF32-class
    dots in the model's own matmuls).
    """
    model, _ = helpers.tiny_models(kind, "cuda")
    ids, mask, _ = helpers.padded_batch([15, 11], [6, 6], device="cuda")
    prompt = 9
    rec = CachedRecorder(model, prompt_len=prompt, request=REQUEST, hidden_layers=HIDDEN)
    with rec:
        rec.feed(ids[:, :prompt], attention_mask=mask[:, :prompt])
        for at, n in ((9, 1), (10, 3), (13, 2)):
            rec.feed(ids[:, at : at + n])
    gpu_tol = dict(atol=3e-3, rtol=3e-3)
    assert_same_stats(rec.stats(), _reference(model, ids, mask, prompt), gpu_tol, gpu_tol)


def test_prefill_that_holds_the_start_of_the_answer(helpers):
    """The first call may carry answer tokens after the prompt: those rows are scored in the prefill."""
    model, _ = helpers.tiny_models("qwen3")
    ids, mask, _ = helpers.padded_batch([13, 9], [5, 5])
    rec = CachedRecorder(model, prompt_len=8, request=REQUEST, hidden_layers=HIDDEN)
    with rec:
        rec.feed(ids[:, :11], attention_mask=mask[:, :11])
        rec.feed(ids[:, 11:])
    assert_same_stats(rec.stats(), _reference(model, ids, mask, 8))


GENERATE = {
    "llama-dynamic-greedy": ("llama", "dynamic", False),
    "llama-static-sample": ("llama", "static", True),
    "qwen3-static-greedy": ("qwen3", "static", False),
    "qwen3sliding-dynamic-sample": ("qwen3_sliding", "dynamic", True),
    "gemma2-softcap-dynamic-greedy": ("gemma2", "dynamic", False),
    "gemma2-softcap-static-greedy": ("gemma2", "static", False),
    "mistral-window-dynamic-greedy": ("mistral", "dynamic", False),
}


GENERATE_SLOW = {
    "llama-dynamic-greedy",
    "qwen3-static-greedy",
    "gemma2-softcap-dynamic-greedy",
}  # the others cover static/dynamic, greedy/sample


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=pytest.mark.slow) if c in GENERATE_SLOW else c for c in GENERATE], ids=str
)
def test_generate_equals_record_forward_on_generated_ids(helpers, case):
    kind, cache_kind, sample = GENERATE[case]
    model, _ = helpers.tiny_models(kind)
    ids, mask, _ = helpers.padded_batch([9, 6], [1, 1])
    prompt = 9
    cache = (
        StaticCache(config=model.config, max_cache_len=24)
        if cache_kind == "static"
        else DynamicCache(config=model.config)
    )
    config = GenerationConfig(
        max_new_tokens=7, do_sample=sample, top_k=0 if sample else None, pad_token_id=0, eos_token_id=None
    )
    rec = CachedRecorder(model, prompt_len=prompt, request=REQUEST, hidden_layers=HIDDEN, capacity=2)
    torch.manual_seed(0)
    with rec:
        out = model.generate(ids, attention_mask=mask, past_key_values=cache, generation_config=config)
        rec.feed(out[:, -1:])  # the last sampled token has not been read yet
    assert out.shape[1] == prompt + 7 and rec.seen == prompt + 7
    full_mask = torch.cat([mask, torch.ones(2, 7, dtype=mask.dtype)], 1)
    assert_same_stats(rec.stats(), _reference(model, out, full_mask, prompt))


def test_scored_layers_subset_and_no_logits(helpers):
    model, _ = helpers.tiny_models("llama")
    ids, mask, _ = helpers.padded_batch([12, 12], [4, 4])
    rec = CachedRecorder(model, prompt_len=8, layers=[-1], logits=False, request=StatsRequest(rows=True))
    with rec:
        rec.feed(ids[:, :8])
        rec.feed(ids[:, 8:])
    got = rec.stats()
    ref = record_forward(
        model,
        ids,
        response_start=8,
        layers=[-1],
        logits=False,
        request=StatsRequest(rows=True),
        full_columns=True,
    )
    assert got.layers == (1,) and got.lookups is None and got.columns is None and got.logit_stats is None
    torch.testing.assert_close(got.rows.entropy, ref.rows.entropy, **TOL)


def test_buffer_bytes_count_every_output_slot_and_the_column_state(helpers):
    """Two layers, 4 query heads, 2 sinks, 2 hidden layers of 64: the sizes from the shapes alone."""
    model, _ = helpers.tiny_models("llama")
    ids, mask, _ = helpers.padded_batch([13, 13], [5, 5])
    req = StatsRequest(rows=True, lookups=True, columns=True, sink_positions=(0, 1))
    rec = CachedRecorder(model, prompt_len=8, request=req, hidden_layers=(0, -1), capacity=2)
    assert rec.buffer_bytes() == 0
    sizes = []
    with rec:
        rec.feed(ids[:, :8])
        for at in range(8, 13):
            rec.feed(ids[:, at : at + 1])
            a, keys = rec.capacity, rec.buf.key_mask.shape[1]
            b, nl, hq, s, nh, dm = 2, 2, 4, 2, 2, 64
            v = len(LOGIT_STAT_NAMES)  # 56 logit statistics per answer token
            per_token = b * nl * hq * a * (5 + 2 + s) + b * a * v + b * nh * a * dm  # float32 slots
            per_key = nl * (b * hq * keys + b * keys)  # column sums and counts, float32
            assert rec.buffer_bytes() == 4 * (per_token + per_key) + b * keys  # + the bool key mask
            sizes.append(rec.buffer_bytes())
    assert rec.capacity == 8 and sizes == sorted(sizes) and sizes[0] < sizes[-1]  # 2 -> 4 -> 8 slots


def test_errors_name_what_was_expected(helpers):
    model, _ = helpers.tiny_models("llama")
    ids, _, _ = helpers.padded_batch([12], [4])
    rec = CachedRecorder(model, prompt_len=8)
    with pytest.raises(RuntimeError, match="inside `with recorder:`"):
        rec.feed(ids)
    with pytest.raises(ValueError, match=r"first call must hold the whole prompt \(8 tokens\), got 5"):
        with rec:
            rec.feed(ids[:, :5])
    with pytest.raises(ValueError, match="prompt_len must be an int >= 1"):
        CachedRecorder(model, prompt_len=0)
    with pytest.raises(ValueError, match="no call was recorded"):
        CachedRecorder(model, prompt_len=3).stats()
    rec = CachedRecorder(model, prompt_len=8)
    with rec, pytest.raises(RuntimeError, match="cannot be nested"):
        with CachedRecorder(model, prompt_len=8):
            pass
    rec = CachedRecorder(model, prompt_len=8)
    with rec:
        rec.feed(ids[:, :8])
        with pytest.raises(RuntimeError, match="inference only"):
            model(input_ids=ids[:, 8:9], past_key_values=rec.cache, use_cache=True)
        expected = r"needs the logits of rows 0..2 of this call \(4 tokens, the last 1"
        with torch.no_grad(), pytest.raises(ValueError, match=expected):
            model(input_ids=ids[:, 8:], past_key_values=rec.cache, use_cache=True, logits_to_keep=1)


def _graph_steps(helpers, device, capture, dtype=torch.float32, q=1, kind="qwen3", restart=False):
    """Prefill on a static cache, then 6 teacher-forced steps through GraphedDecodeStep.

    With ``restart``, a first answer (another batch, no padding: the kernels' unmasked path) runs
    through the same step before it is restarted for the answer that is returned (padded: the step is
    warmed up and captured again for the masked path, then replayed).
    """
    model, _ = helpers.tiny_models(kind, device)
    model = model.to(dtype)
    batches = [helpers.padded_batch([15, 12], [6, 6], device=device)]
    if restart:
        batches.insert(0, helpers.padded_batch([15, 15], [6, 6], seed=7, device=device))
    prompt = 9
    cache = StaticCache(config=model.config, max_cache_len=20)
    rec = CachedRecorder(
        model, prompt_len=prompt, request=REQUEST, hidden_layers=HIDDEN, capacity=8, cache=cache
    )
    step = None
    with rec:
        for ids, mask, _ in batches:
            if step is not None:
                cache.reset()
                rec.restart()
            rec.feed(ids[:, :prompt], attention_mask=mask[:, :prompt])
            assert rec.padded == (not bool(mask[:, :prompt].all()))
            if step is None:
                step = GraphedDecodeStep(
                    model, cache, mask[:, :prompt], recorder=rec, capture=capture, tokens_per_step=q
                )
            else:
                step.restart(mask[:, :prompt])
            logits = [step(ids[:, at : at + q]) for at in range(prompt, 15, q)]
    return model, ids, mask, prompt, rec.stats(), logits


@pytest.mark.parametrize(
    ("q", "restart"),
    [
        pytest.param(1, False, id="decode-one-answer", marks=pytest.mark.slow),
        pytest.param(1, True, id="decode-restarted", marks=pytest.mark.slow),
        pytest.param(3, False, id="chunks-of-3-one-answer", marks=pytest.mark.slow),
        pytest.param(3, True, id="chunks-of-3-restarted"),
    ],
)
def test_decode_step_runs_from_device_state_alone(helpers, q, restart):
    """The step code that a graph captures, run eagerly: every answer statistic equals record_forward.

    Restarted: the recorder and the step follow a second prompt (other padding, other sinks) in the
    same buffers, and nothing of the first answer leaks into the second one's statistics.
    """
    model, ids, mask, prompt, got, _ = _graph_steps(helpers, "cpu", capture=False, q=q, restart=restart)
    assert_same_stats(got, _reference(model, ids, mask, prompt))
    with pytest.raises(ValueError, match=r"capture=True\) needs a model on a CUDA device"):
        GraphedDecodeStep(model, StaticCache(config=model.config, max_cache_len=20), mask)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("q", [1, 3], ids=["decode", "chunks-of-3"])
@pytest.mark.parametrize("kind", ["qwen3", "llama"])
def test_captured_decode_steps_equal_record_forward(helpers, kind, q, dtype):
    """Captured steps (replayed for a restarted second answer, left-padded, sinks per example).

    fp32: every statistic equals record_forward within the GPU bound of the recorded forward (3e-3,
    TF32-class dots). bf16: the model's own matmuls round differently on a few rows than on the whole
    sequence, so the bound is the one of graphs today: replays equal the same steps run eagerly (1e-5).
    """
    model, ids, mask, prompt, got, logits = _graph_steps(
        helpers, "cuda", capture=True, dtype=dtype, q=q, kind=kind, restart=True
    )
    if dtype == torch.float32:
        gpu_tol = dict(atol=3e-3, rtol=3e-3)
        assert_same_stats(got, _reference(model, ids, mask, prompt), gpu_tol, gpu_tol)
    _, _, _, _, eager, eager_logits = _graph_steps(
        helpers, "cuda", capture=False, dtype=dtype, q=q, kind=kind, restart=True
    )
    for a, b in zip(logits, eager_logits, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert_same_stats(got, eager, TOL, TOL)


@pytest.mark.parametrize(
    "kind,lengths",
    [
        *(
            pytest.param(kind, lengths, id=name, marks=pytest.mark.slow)
            for kind, lengths, name in (
                ("llama", [15, 11], "llama"),
                ("llama", [15, 15], "llama-unpadded"),
                ("gemma2", [15, 11], "gemma2"),
                ("qwen3_sliding", [15, 11], "qwen3_sliding"),
            )
        ),
    ],
)
def test_streamed_chunks_on_the_triton_kernels_equal_record_forward(helpers, kind, lengths, monkeypatch):
    """The recorder on the split-K Triton kernels (interpreted on the CPU): statistics written into the
    answer slots in place, the running columns from the split kernel's scores. Without padding the
    kernels get no key mask (their unmasked path), with padding every call gets one."""
    import flashstats_hf.cached as cached

    masks = []

    def spy(*args, **kwargs):
        masks.append(kwargs["key_mask"])
        return decode_attention(*args, **kwargs)

    monkeypatch.setattr(cached, "decode_attention", spy)
    model, _ = helpers.tiny_models(kind)
    ids, mask, _ = helpers.padded_batch(lengths, [6, 6])
    prompt = 9
    rec = CachedRecorder(model, prompt_len=prompt, request=REQUEST, hidden_layers=HIDDEN, backend="triton")
    with rec:
        rec.feed(ids[:, :prompt], attention_mask=mask[:, :prompt])
        for at, n in ((prompt, 1), (prompt + 1, 3), (prompt + 4, 2)):
            rec.feed(ids[:, at : at + n])
    assert_same_stats(rec.stats(), _reference(model, ids, mask, prompt))
    padded = lengths[0] != lengths[1]
    assert rec.padded == padded and masks and all((m is not None) == padded for m in masks)


def test_chunked_layers_raise_and_can_be_left_out(helpers):
    """Llama 4's chunked layers cannot be scored from the cache: raise (not score them as causal)."""
    model, _ = helpers.tiny_models("llama4")
    model.config.attention_chunk_size = 3
    ids, mask, _ = helpers.padded_batch([9, 7], [3, 3])
    with (
        CachedRecorder(model, prompt_len=6) as rec,
        pytest.raises(ValueError, match="layer 0 is non-causal, chunked"),
    ):
        rec.feed(ids[:, :6], attention_mask=mask[:, :6])
    rec = CachedRecorder(model, prompt_len=6, request=REQUEST, layers=[1])
    with rec:
        rec.feed(ids[:, :6], attention_mask=mask[:, :6])
        rec.feed(ids[:, 6:8])
        rec.feed(ids[:, 8:])
    start = torch.full((2,), 6)
    ref = record_forward(
        model,
        ids,
        response_start=start,
        attention_mask=mask,
        request=REQUEST,
        layers=[1],
        pack=False,
        full_columns=True,
    )
    for name in ROW_FIELDS:
        torch.testing.assert_close(getattr(rec.stats().rows, name), getattr(ref.rows, name), **TOL, msg=name)
    torch.testing.assert_close(rec.stats().logit_stats, ref.logit_stats, **TOL)
