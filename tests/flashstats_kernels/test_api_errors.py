"""Every malformed input raises ValueError/TypeError naming what was expected."""

import flashstats_kernels as fk
import pytest
import torch

B, HQ, HKV, R, L, D = 2, 4, 2, 3, 8, 16


def good():
    return torch.randn(B, HQ, R, D), torch.randn(B, HKV, L, D), torch.randn(B, HKV, L, D)


def call(q=None, k=None, v=None, **kwargs):
    q0, k0, v0 = good()
    return fk.response_attention(
        q0 if q is None else q, k0 if k is None else k, v0 if v is None else v, backend="torch", **kwargs
    )


SHAPE_ERRORS = {
    "q-3d": (dict(q=torch.randn(B, HQ, D)), ValueError, r"q must have shape \[B, Hq, R, D\]"),
    "k-batch": (dict(k=torch.randn(B + 1, HKV, L, D)), ValueError, r"k must have shape \[B=2"),
    "k-headdim": (dict(k=torch.randn(B, HKV, L, D + 1)), ValueError, r"D=16"),
    "gqa": (dict(k=torch.randn(B, 3, L, D), v=torch.randn(B, 3, L, D)), ValueError, r"multiple of Hkv"),
    "v-shape": (dict(v=torch.randn(B, HKV, L + 1, D)), ValueError, r"v must have the shape of k"),
    "d-too-big": (
        dict(q=torch.randn(B, HQ, R, 257), k=torch.randn(B, HKV, L, 257), v=torch.randn(B, HKV, L, 257)),
        ValueError,
        r"D must be <= 256",
    ),
    "r-gt-l": (dict(q=torch.randn(B, HQ, L + 1, D)), ValueError, r"1 <= R <= L"),
    "r-zero": (dict(q=torch.randn(B, HQ, 0, D)), ValueError, r"1 <= R <= L"),
    "dtype-mismatch": (dict(k=torch.randn(B, HKV, L, D, dtype=torch.float16)), TypeError, r"q's dtype"),
    "not-tensor": (dict(q=[[1.0]]), TypeError, r"q must be a torch.Tensor"),
    "int-dtype": (
        dict(
            q=torch.ones(B, HQ, R, D, dtype=torch.int32),
            k=torch.ones(B, HKV, L, D, dtype=torch.int32),
            v=torch.ones(B, HKV, L, D, dtype=torch.int32),
        ),
        TypeError,
        r"backend='torch' takes dtypes",
    ),  # fmt: skip
}


@pytest.mark.parametrize("kwargs,exc,match", list(SHAPE_ERRORS.values()), ids=list(SHAPE_ERRORS))
def test_shape_and_dtype_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        call(**kwargs)


OPTION_ERRORS = {
    "mask-dtype": (dict(key_mask=torch.ones(B, L)), TypeError, r"key_mask must be a bool tensor"),
    "mask-shape": (dict(key_mask=torch.ones(B, L + 1, dtype=torch.bool)), ValueError, r"\[B, L\] = \[2, 8\]"),
    "mask-type": (dict(key_mask=[True] * L), TypeError, r"key_mask must be None or a \[B, L\] bool"),
    "prompt-neg": (dict(prompt_len=-1), ValueError, r"prompt_len must lie in \[0, L=8\]"),
    "prompt-big": (dict(prompt_len=L + 1), ValueError, r"prompt_len must lie in \[0, L=8\]"),
    "prompt-tensor-range": (
        dict(prompt_len=torch.tensor([0, 9])),
        ValueError,
        r"values must lie in \[0, L=8\]",
    ),
    "prompt-tensor-shape": (dict(prompt_len=torch.tensor([1, 2, 3])), ValueError, r"shape \[B\] = \[2\]"),
    "prompt-float": (dict(prompt_len=torch.tensor([1.0, 2.0])), TypeError, r"integer dtype"),
    "prompt-str": (dict(prompt_len="3"), TypeError, r"prompt_len must be None, an int"),
    "softcap-neg": (dict(softcap=-1.0), ValueError, r"softcap must be a positive"),
    "window-zero": (dict(window=0), ValueError, r"window must be >= 1"),
    "window-float": (dict(window=2.5), TypeError, r"window must be None or an int"),
    "scale-nan": (dict(scale=float("nan")), TypeError, r"scale must be None or a finite float"),
    "backend": (dict(backend="cuda"), ValueError, r"backend must be one of"),
    "request-type": (dict(request={"rows": True}), TypeError, r"request must be a StatsRequest"),
    "diag-eps": (dict(request=fk.StatsRequest(lookups=True, diag_eps=0.0)), ValueError, r"diag_eps must lie"),
    "sinks-float": (
        dict(request=fk.StatsRequest(lookups=True, sink_positions=torch.zeros(B, 1))),
        TypeError,
        r"integer dtype",
    ),
    "sinks-shape": (
        dict(request=fk.StatsRequest(lookups=True, sink_positions=torch.zeros(B + 1, 1, dtype=torch.int64))),
        ValueError,
        r"sink_positions tensor must have shape \[B=2, S\]",
    ),
    "sinks-tuple": (
        dict(request=fk.StatsRequest(lookups=True, sink_positions=(0.5,))),
        TypeError,
        r"hold ints",
    ),
}


@pytest.mark.parametrize("kwargs,exc,match", list(OPTION_ERRORS.values()), ids=list(OPTION_ERRORS))
def test_option_errors(kwargs, exc, match):
    if "backend" in kwargs:
        q, k, v = good()
        with pytest.raises(exc, match=match):
            fk.response_attention(q, k, v, **kwargs)
        return
    with pytest.raises(exc, match=match):
        call(**kwargs)


def test_triton_on_cpu_needs_the_interpreter(monkeypatch):
    q, k, v = good()
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match=r"backend='triton' needs CUDA tensors"):
        fk.response_attention(q, k, v, backend="triton")
    with pytest.raises(ValueError, match=r"backend='triton' needs CUDA tensors"):
        fk.response_columns(q, k, torch.zeros(B, HQ, R), backend="triton")


def test_triton_rejects_float64(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    q, k, v = (t.double() for t in good())
    with pytest.raises(TypeError, match=r"backend='triton' takes dtypes"):
        fk.response_attention(q, k, v, backend="triton")


def test_device_mismatch():
    q, k, v = good()
    with pytest.raises(ValueError, match=r"k must be on q's device"):
        fk.response_attention(q, k.to("meta"), v.to("meta"), backend="torch")
    with pytest.raises(ValueError, match=r"key_mask must be on q's device"):
        fk.response_attention(
            q, k, v, key_mask=torch.ones(B, L, dtype=torch.bool, device="meta"), backend="torch"
        )


LSE_ERRORS = {
    "lse-shape": (torch.zeros(B, HQ, R + 1), ValueError, r"lse must have shape \[B, Hq, R\] = \[2, 4, 3\]"),
    "lse-dtype": (torch.zeros(B, HQ, R, dtype=torch.float16), TypeError, r"lse must be float32"),
    "lse-type": (None, TypeError, r"lse must be a torch.Tensor"),
}


@pytest.mark.parametrize("lse,exc,match", list(LSE_ERRORS.values()), ids=list(LSE_ERRORS))
@pytest.mark.parametrize("post_pass", ["lookups", "columns"])
def test_post_pass_errors(post_pass, lse, exc, match):
    q, k, _ = good()
    fn = fk.response_lookups if post_pass == "lookups" else fk.response_columns
    with pytest.raises(exc, match=match):
        fn(q, k, lse, backend="torch")


def test_post_pass_checks_its_own_options():
    q, k, _ = good()
    lse = torch.zeros(B, HQ, R)
    with pytest.raises(ValueError, match=r"diag_eps must lie"):
        fk.response_lookups(q, k, lse, diag_eps=2.0, backend="torch")
    with pytest.raises(ValueError, match=r"window must be >= 1"):
        fk.response_columns(q, k, lse, window=-2, backend="torch")


def test_naive_reference_validates_too():
    q, k, v = good()
    with pytest.raises(ValueError, match=r"multiple of Hkv"):
        fk.naive_response_attention(q, k[:, :1].expand(B, 3, L, D), v[:, :1].expand(B, 3, L, D))


@pytest.mark.parametrize("dtype", [torch.complex64, torch.bool, torch.int64])
def test_naive_reference_refuses_non_real_dtypes(dtype):
    q, k, v = (t.to(dtype) for t in good())
    with pytest.raises(TypeError, match=r"real floating dtype, got torch\."):
        fk.naive_response_attention(q, k, v)


@pytest.mark.parametrize("eps", [0.0, -1.0, 2.0, float("nan")])
def test_naive_reference_checks_diag_eps(eps):
    with pytest.raises(ValueError, match=r"diag_eps must lie in \(0, 1\]"):
        fk.naive_response_attention(*good(), request=fk.StatsRequest(lookups=True, diag_eps=eps))


def _state(*shape: int) -> fk.RowState:
    return fk.row_state(
        torch.randn(*shape, 5), torch.ones(5, dtype=torch.bool), torch.zeros(5, dtype=torch.bool)
    )


def test_merge_states_refuses_states_of_other_rows():
    with pytest.raises(ValueError, match=r"same rows .* got x \{'m': \(2,\).* and y \{'m': \(5, 2\)"):
        fk.merge_states(_state(2), _state(5, 2))  # would broadcast to [5, 2]
    with pytest.raises(TypeError, match=r"two RowState, got y = NoneType"):
        fk.merge_states(_state(2), None)
    with pytest.raises(TypeError, match=r"two RowState, got x = dict"):
        fk.merge_states({}, _state(2))


@pytest.mark.parametrize(
    "prompt_len",
    [100, 5, torch.tensor([2, 100]), torch.tensor([-3, 1])],
    ids=["int", "int-one", "t", "t-neg"],
)
def test_packed_prompt_len_lies_within_each_sequence(prompt_len):
    """As in a dense call, a prompt length lies in ``[0, L_b]`` (here L = 5 and 4)."""
    q, k = torch.randn(5, 2, 8), torch.randn(9, 1, 8)
    cu_q, cu_k = torch.tensor([0, 3, 5]), torch.tensor([0, 5, 9])
    with pytest.raises(ValueError, match=r"prompt_len must lie in \[0, L_b\] for every sequence, got"):
        fk.response_attention_varlen(q, k, k, cu_q, cu_k, 3, 5, prompt_len=prompt_len, backend="torch")


def test_decode_prompt_len_lies_within_the_written_keys():
    q, k = torch.randn(1, 2, 1, 8), torch.randn(1, 1, 12, 8)
    with pytest.raises(ValueError, match=r"prompt_len must lie in \[0, L=5\], got 9"):
        fk.decode_attention(q, k, k, kv_len=5, prompt_len=9, backend="torch")
    with pytest.raises(ValueError, match=r"prompt_len values must lie in \[0, L=5\]"):
        fk.decode_attention(q, k, k, kv_len=5, prompt_len=torch.tensor([6]), backend="torch")
    fk.decode_attention(q, k, k, kv_len=5, prompt_len=5, backend="torch")  # the bound itself is fine
