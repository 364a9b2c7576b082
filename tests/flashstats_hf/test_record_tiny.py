"""record_forward on tiny random Qwen3 / Llama / Gemma2 models against eager attention weights."""

from __future__ import annotations

import copy

import pytest
import torch
from flashstats_hf import ATTN_IMPLEMENTATION, LOGIT_STAT_NAMES, CachedRecorder, load_model, record_forward
from flashstats_kernels import StatsRequest
from tokenizers import Tokenizer, models
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
TOL = {"cpu": dict(atol=2e-4, rtol=2e-4), "cuda": dict(atol=3e-3, rtol=3e-3)}  # cuda: TF32-class dots
# kind, total lengths, answer lengths (left padding; answers end every sequence)
CASES = {
    "qwen3-B1-L11-A4": ("qwen3", [11], [4]),
    "qwen3-B3-L14-A8-padrows": ("qwen3", [14, 4, 9], [8, 2, 1]),
    "llama-B2-L12-A5": ("llama", [12, 7], [2, 5]),
    "qwen3sliding-B2-L13-A6": ("qwen3_sliding", [13, 8], [6, 3]),
    "gemma2-softcap-B2-L10-A4": ("gemma2", [10, 13], [4, 2]),
    "gemma3-B2-L12-A5": ("gemma3", [12, 6], [5, 2]),
    "mistral-window-B2-L11-A7": ("mistral", [11, 9], [7, 3]),
    "gpt2-B2-L12-A4": ("gpt2", [12, 7], [4, 3]),
    "exaone4-full-layer-B2-L10-A4": ("exaone4", [10, 6], [4, 2]),
    "cohere-logit-scale-B2-L9-A3": ("cohere", [9, 5], [3, 1]),
    "granite-logits-scaling-B2-L9-A3": ("granite", [9, 5], [3, 1]),
    "deepseek_v3-mla-B2-L9-A3": ("deepseek_v3", [9, 6], [3, 2]),
    "llama4-body-in-model-B2-L9-A3": ("llama4", [9, 6], [3, 2]),
}
ROW_FIELDS = ("entropy", "normalized_entropy", "prompt_mass", "max_weight", "effective_support")


def _window(model, layer):
    config = model.config
    types = getattr(config, "layer_types", None)
    if types is None:  # Mistral: one window for every layer
        return getattr(config, "sliding_window", None)
    return config.sliding_window if types[layer] == "sliding_attention" else None


def _record(helpers, kind, lengths, answers, device, **kw):
    ours, eager = helpers.tiny_models(kind, device)
    ids, mask, start = helpers.padded_batch(lengths, answers, device=device)
    padded = len(set(lengths)) > 1
    fs = record_forward(ours, ids, response_start=start, attention_mask=mask if padded else None, **kw)
    return fs, eager, ids, mask, start


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_statistics_match_eager_attention(helpers, case, device):
    kind, lengths, answers = CASES[case]
    request = StatsRequest(rows=True, lookups=True, columns=True, sink_positions=(0, 2))
    fs, eager, ids, mask, start = _record(
        helpers, kind, lengths, answers, device, request=request, hidden_layers=[0, 1, -1], full_columns=True
    )
    ref = helpers.eager_forward(eager, ids, mask)
    n_layers = eager.config.num_hidden_layers
    assert fs.layers == tuple(range(n_layers))
    assert fs.answer_len.tolist() == answers
    assert fs.prompt_len.tolist() == [n - a for n, a in zip(lengths, answers, strict=True)]
    tol = TOL[device]
    for li, layer in enumerate(fs.layers):
        exp = helpers.eager_statistics(
            ref.attentions[layer].cpu(), mask.cpu(), start.cpu(), sinks=(0, 2), window=_window(eager, layer)
        )
        for name in ROW_FIELDS:
            torch.testing.assert_close(
                getattr(fs.rows, name)[:, li].cpu().double(), exp[name], **tol, msg=name
            )
        for name in ("diag_log", "prev_weight", "sink_weights"):
            torch.testing.assert_close(
                getattr(fs.lookups, name)[:, li].cpu().double(), exp[name], **tol, msg=name
            )
        torch.testing.assert_close(fs.columns.sum[:, li].cpu().double(), exp["col_sum"], **tol)
        torch.testing.assert_close(fs.columns.mean[:, li].cpu().double(), exp["col_mean"], **tol)
    assert fs.logit_stat_names == LOGIT_STAT_NAMES
    exp_logits = helpers.eager_logit_statistics(ref.logits.cpu(), ids.cpu(), start.cpu())
    torch.testing.assert_close(fs.logit_stats.cpu().double(), exp_logits, **tol)
    for k, index in enumerate(fs.hidden_layers):
        pos = fs.response_start[:, None] + torch.arange(fs.answer_mask.shape[1], device=device)
        exp_h = ref.hidden_states[index].gather(
            1, pos.clamp(max=ids.shape[1] - 1)[..., None].expand(-1, -1, 64)
        )
        exp_h = torch.where(fs.answer_mask[..., None], exp_h, 0.0)
        torch.testing.assert_close(fs.hidden[:, k], exp_h, **tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["qwen3", "llama", "gemma2"])
def test_plain_forward_matches_reference_implementation(helpers, kind, device):
    ours, eager = helpers.tiny_models(kind, device)
    # Gemma2 soft-caps its scores, which SDPA cannot: compare with eager there, with SDPA elsewhere.
    ref_impl = "eager" if kind == "gemma2" else "sdpa"
    ref = AutoModelForCausalLM.from_config(copy.deepcopy(eager.config), attn_implementation=ref_impl)
    ref.load_state_dict(ours.state_dict())
    ref = ref.to(device).eval()
    ids, mask, _ = helpers.padded_batch([9, 14, 6], [1, 1, 1], device=device)
    with torch.no_grad():
        got = ours(ids, attention_mask=mask).logits
        exp = ref(ids, attention_mask=mask).logits
    keep = mask.bool()
    torch.testing.assert_close(got[keep], exp[keep], **TOL[device])


def test_set_attn_implementation_switches_an_sdpa_model(helpers):
    ours, _ = helpers.tiny_models("llama")
    sdpa = AutoModelForCausalLM.from_config(copy.deepcopy(ours.config), attn_implementation="sdpa").eval()
    sdpa.load_state_dict(ours.state_dict())
    ids, mask, start = helpers.padded_batch([9, 12], [3, 4])
    with pytest.raises(ValueError, match=ATTN_IMPLEMENTATION):
        record_forward(sdpa, ids, response_start=start, attention_mask=mask)
    sdpa.set_attn_implementation(ATTN_IMPLEMENTATION)
    got = record_forward(sdpa, ids, response_start=start, attention_mask=mask)
    exp = record_forward(ours, ids, response_start=start, attention_mask=mask)
    torch.testing.assert_close(got.rows.entropy, exp.rows.entropy)


def test_scoring_a_subset_leaves_other_layers_untouched(helpers):
    kind, lengths, answers = CASES["qwen3-B3-L14-A8-padrows"]
    every = dict(hidden_layers=[0, 1, 2, 3], full_columns=True)
    full, *_ = _record(helpers, kind, lengths, answers, "cpu", **every)
    one, *_ = _record(helpers, kind, lengths, answers, "cpu", layers=[1], **every)
    none, *_ = _record(helpers, kind, lengths, answers, "cpu", layers=[], **every)
    assert one.layers == (1,) and none.layers == () and none.rows is None
    for name in ROW_FIELDS:
        torch.testing.assert_close(getattr(one.rows, name)[:, 0], getattr(full.rows, name)[:, 1])
    torch.testing.assert_close(one.columns.sum[:, 0], full.columns.sum[:, 1])
    # Layer 0 runs plain SDPA in both: its input and output are bitwise those of an unscored forward.
    assert torch.equal(one.hidden[:, :2], none.hidden[:, :2])
    torch.testing.assert_close(one.hidden, none.hidden, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(one.logit_stats, none.logit_stats, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_results_do_not_depend_on_the_batch(helpers, device):
    kind, lengths, answers = CASES["qwen3-B3-L14-A8-padrows"]
    kw = dict(
        hidden_layers=[0, 2], request=StatsRequest(rows=True, lookups=True, columns=True), full_columns=True
    )
    ours, _ = helpers.tiny_models(kind, device)
    ids, mask, start = helpers.padded_batch(lengths, answers, device=device)
    batch = record_forward(ours, ids, response_start=start, attention_mask=mask, **kw)
    length = ids.shape[1]
    for b, (n, a) in enumerate(zip(lengths, answers, strict=True)):
        alone = record_forward(ours, ids[b : b + 1, length - n :], response_start=n - a, **kw)
        pad = length - n
        tol = dict(atol=2e-5, rtol=2e-5) if device == "cpu" else TOL[device]
        for name in ROW_FIELDS:
            torch.testing.assert_close(
                getattr(batch.rows, name)[b, ..., :a], getattr(alone.rows, name)[0], **tol
            )
        torch.testing.assert_close(
            batch.lookups.sink_weights[b, ..., :a, :], alone.lookups.sink_weights[0], **tol
        )
        torch.testing.assert_close(batch.columns.mean[b, ..., pad:], alone.columns.mean[0], **tol)
        torch.testing.assert_close(batch.logit_stats[b, :a], alone.logit_stats[0], **tol)
        # hidden states in units of each layer's largest activation (up to ~60 by layer 2 here): fp32
        # matmuls of another batch shape round differently, a few ulps at that scale (3e-5 seen on one CPU)
        scale = alone.hidden[0].abs().amax(dim=(-1, -2), keepdim=True).clamp_min(1.0)
        torch.testing.assert_close(batch.hidden[b, :, :a] / scale, alone.hidden[0] / scale, **tol)
        assert alone.key_mask.all() and alone.answer_mask.all()


def test_non_causal_layers_run_unscored_with_a_warning(helpers):
    ours, eager = helpers.tiny_models("llama")
    ours.config.is_causal = False
    eager.config.is_causal = False
    ids, mask, start = helpers.padded_batch([9, 12], [3, 4])
    with pytest.warns(UserWarning, match="runs unscored"):
        fs = record_forward(ours, ids, response_start=start, attention_mask=mask)
    assert fs.layers == () and fs.rows is None and fs.columns is None
    ref = helpers.eager_forward(eager, ids, mask)
    torch.testing.assert_close(
        fs.logit_stats.double(), helpers.eager_logit_statistics(ref.logits, ids, start), **TOL["cpu"]
    )


def test_chunked_attention_layers_run_unscored_and_keep_their_chunks(helpers):
    """Llama 4's chunked layers get the dense mask (not the sliding keep mask): unscored, outputs as eager."""
    ours, eager = helpers.tiny_models("llama4")
    for model in (ours, eager):
        model.config.attention_chunk_size = 3
    ids, mask, start = helpers.padded_batch([9, 7], [3, 2])
    with torch.no_grad():
        got, want = ours(ids, attention_mask=mask).logits, eager(ids, attention_mask=mask).logits
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], **TOL["cpu"])
    with pytest.warns(UserWarning, match="layer 0 runs unscored"):
        fs = record_forward(ours, ids, response_start=start, attention_mask=mask, pack=False)
    assert fs.layers == (1,)
    ref = helpers.eager_forward(eager, ids, mask)
    exp = helpers.eager_statistics(ref.attentions[1], mask, start)
    torch.testing.assert_close(fs.rows.entropy[:, 0].double(), exp["entropy"], **TOL["cpu"])
    exp_logits = helpers.eager_logit_statistics(ref.logits, ids, start)
    torch.testing.assert_close(fs.logit_stats.double(), exp_logits, **TOL["cpu"])


def test_layers_that_never_reach_the_attention_function_raise():
    """A family that computes attention itself (CodeGen) cannot come back silently unscored."""
    from transformers import CodeGenConfig

    torch.manual_seed(0)
    config = CodeGenConfig(vocab_size=101, n_embd=64, n_layer=2, n_head=4, rotary_dim=8)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=ATTN_IMPLEMENTATION).eval()
    ids = torch.randint(3, 101, (1, 9))
    with pytest.raises(RuntimeError, match=r"layers \[0, 1\] of CodeGenForCausalLM never called"):
        record_forward(model, ids, response_start=5)
    recorder = CachedRecorder(model, prompt_len=5)  # streaming: the first call already fails
    with recorder, torch.no_grad(), pytest.raises(RuntimeError, match="computes attention itself"):
        recorder.feed(ids[:, :5])


def test_a_family_that_fails_on_the_keep_mask_is_named():
    """Bloom computes attention itself and chokes on the [B, L] keep mask of a padded batch: say why."""
    from transformers import BloomConfig

    torch.manual_seed(0)
    config = BloomConfig(vocab_size=101, hidden_size=32, n_layer=1, n_head=4)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=ATTN_IMPLEMENTATION).eval()
    ids = torch.randint(3, 101, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    with pytest.raises(
        RuntimeError, match=r"no layer of BloomForCausalLM called the 'attnstats' .* compute attention itself"
    ):
        record_forward(model, ids, response_start=4, attention_mask=mask, pack=False)


def test_a_layer_without_its_index_is_named(helpers):
    """One attention module without ``layer_idx`` (as a hybrid model's non-attention layer): leave it out."""
    ours, _ = helpers.tiny_models("llama")
    ids, mask, start = helpers.padded_batch([9, 12], [3, 4])
    ours.model.layers[1].self_attn.layer_idx = None
    with pytest.raises(RuntimeError, match=r"layers \[1\] .* leave them out with layers="):
        record_forward(ours, ids, response_start=start, attention_mask=mask)
    fs = record_forward(ours, ids, response_start=start, attention_mask=mask, layers=[0])
    assert fs.layers == (0,)


def test_bad_inputs_raise_clear_errors(helpers):
    ours, _ = helpers.tiny_models("llama")
    ids, mask, start = helpers.padded_batch([9, 12], [3, 4])
    with pytest.raises(ValueError, match="left-padded"):
        record_forward(ours, ids, response_start=start, attention_mask=mask.flip(1))
    with pytest.raises(ValueError, match="response_start must lie"):
        record_forward(ours, ids, response_start=torch.tensor([12, 5]), attention_mask=mask)
    with pytest.raises(ValueError, match="response_start must lie"):
        record_forward(ours, ids, response_start=torch.tensor([3, 5]), attention_mask=mask)
    with pytest.raises(ValueError, match=r"shape \[B\]"):
        record_forward(ours, ids, response_start=torch.tensor([5]), attention_mask=mask)
    with pytest.raises(TypeError, match="input_ids"):
        record_forward(ours, ids.float(), response_start=start, attention_mask=mask)
    with pytest.raises(ValueError, match=r"at least one example .* got shape \(0, 12\)"):
        record_forward(ours, ids[:0], response_start=start[:0], attention_mask=mask[:0])
    with pytest.raises(ValueError, match="layers must lie"):
        record_forward(ours, ids, response_start=start, attention_mask=mask, layers=[2])
    with pytest.raises(TypeError, match="StatsRequest"):
        record_forward(ours, ids, response_start=start, attention_mask=mask, request={"rows": True})
    ours.train()
    with pytest.raises(ValueError, match="eval mode"):
        record_forward(ours, ids, response_start=start, attention_mask=mask)


def test_load_model_from_a_local_folder(helpers, tmp_path):
    ours, _ = helpers.tiny_models("qwen3")
    ours.save_pretrained(tmp_path)
    tok = Tokenizer(models.WordLevel(vocab={"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(tmp_path)
    model, tokenizer = load_model(tmp_path, dtype=torch.float64)
    assert model.config._attn_implementation == ATTN_IMPLEMENTATION and not model.training
    assert next(model.parameters()).dtype == torch.float64
    for (name, p), (_, q) in zip(ours.named_parameters(), model.named_parameters(), strict=True):
        torch.testing.assert_close(p.double(), q, msg=name)
    with pytest.raises(FileNotFoundError, match="GGUF"):
        load_model(tmp_path / "missing.gguf")
    with pytest.raises(TypeError, match="torch.dtype"):
        load_model(tmp_path, dtype="float32")


def test_load_model_names_families_without_the_attention_interface(tmp_path):
    """Falcon keeps its own attention table: Transformers' KeyError becomes an error that says why."""
    from transformers import FalconConfig, FalconForCausalLM

    FalconForCausalLM(
        FalconConfig(vocab_size=11, hidden_size=16, num_hidden_layers=1, num_attention_heads=2)
    ).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="fixed table of its own"):
        load_model(tmp_path)


def _save_tiny(folder, model):
    model.save_pretrained(folder)
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(folder)
    return folder


def test_load_model_refuses_families_that_never_call_the_interface(tmp_path):
    """Bloom and XGLM accept ``"attnstats"`` but compute attention themselves: every forward would fail."""
    from transformers import BloomConfig, BloomForCausalLM, XGLMConfig, XGLMForCausalLM

    bloom = BloomForCausalLM(BloomConfig(vocab_size=101, hidden_size=32, n_layer=1, n_head=4))
    xglm = XGLMForCausalLM(
        XGLMConfig(vocab_size=101, d_model=32, ffn_dim=32, attention_heads=4, num_layers=1)
    )
    for name, model in (("BloomForCausalLM", bloom), ("XGLMForCausalLM", xglm)):
        folder = _save_tiny(tmp_path / name, model)
        with pytest.raises(ValueError, match=rf"\({name}\) computes attention itself.*Llama, Qwen"):
            load_model(folder)


def test_load_model_keeps_families_whose_flag_understates_them(helpers, tmp_path):
    """StableLM's ``_supports_attention_backend`` is false, yet it calls the interface: loaded and scored."""
    from transformers import StableLmConfig, StableLmForCausalLM

    torch.manual_seed(0)
    config = StableLmConfig(
        vocab_size=101, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=2, initializer_range=0.3,
    )  # fmt: skip
    assert StableLmForCausalLM._supports_attention_backend is False
    folder = _save_tiny(tmp_path, StableLmForCausalLM(config))
    model, _ = load_model(folder, dtype=torch.float64)
    eager = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float64, attn_implementation="eager"
    ).eval()
    ids, mask, start = helpers.padded_batch([9, 9], [3, 2])  # eager StableLM turns padded rows into NaN
    fs = record_forward(model, ids, response_start=start, attention_mask=mask)
    assert fs.layers == (0, 1)
    ref = helpers.eager_forward(eager, ids, mask)
    exp = helpers.eager_statistics(ref.attentions[1], mask, start)
    torch.testing.assert_close(fs.rows.entropy[:, 1].double(), exp["entropy"], **TOL["cpu"])


def test_attention_sinks_raise_instead_of_being_ignored():
    """GPT-OSS passes learned sinks as ``s_aux``: dropping them would silently change every weight."""
    from transformers import GptOssConfig

    torch.manual_seed(0)
    config = GptOssConfig(
        vocab_size=101, hidden_size=32, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, num_hidden_layers=1, num_local_experts=2, num_experts_per_tok=1,
        layer_types=["full_attention"],
    )  # fmt: skip
    model = AutoModelForCausalLM.from_config(config, attn_implementation=ATTN_IMPLEMENTATION).eval()
    ids = torch.randint(3, 101, (1, 6))
    with pytest.raises(ValueError, match=r"layer 0 .*attention sinks \(`s_aux`"):
        record_forward(model, ids, response_start=3)
    with torch.no_grad(), pytest.raises(ValueError, match="attention sinks"):
        model(ids)


def test_response_start_takes_numpy_and_zero_dim_integers(helpers):
    """NumPy integers and arrays and a 0-d integer tensor are read as ints; a NumPy bool is refused."""
    import numpy as np

    ours, _ = helpers.tiny_models("llama")
    ids, mask, start = helpers.padded_batch([9, 12], [3, 3])
    want = record_forward(ours, ids, response_start=start, attention_mask=mask).rows.entropy
    for value in (np.int64(9), torch.tensor(9), start.numpy().astype(np.int32), [np.int32(9), 9]):
        got = record_forward(ours, ids, response_start=value, attention_mask=mask).rows.entropy
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(TypeError, match="got a bool"):
        record_forward(ours, ids, response_start=np.bool_(True), attention_mask=mask)
    with pytest.raises(TypeError, match="integer tensor"):
        record_forward(ours, ids, response_start=np.array([9.0, 9.0]), attention_mask=mask)


def test_a_head_dim_over_the_kernels_limit_names_the_layer():
    """A scored layer whose heads are wider than 256 fails naming the layer, not deep in the kernel."""
    from transformers import LlamaConfig

    config = LlamaConfig(
        vocab_size=101, hidden_size=64, intermediate_size=96, num_attention_heads=2, num_key_value_heads=1,
        head_dim=320, num_hidden_layers=2,
    )  # fmt: skip
    model = AutoModelForCausalLM.from_config(config, attn_implementation=ATTN_IMPLEMENTATION).eval()
    ids = torch.randint(0, 101, (1, 12))
    with torch.no_grad():
        plain = model(ids).logits  # unscored layers still run (on SDPA)
        with pytest.raises(ValueError, match=r"layer 1 \(LlamaAttention\) has head dim 320.*up to 256"):
            record_forward(model, ids, response_start=8, layers=[1])
    assert torch.isfinite(plain).all()
