"""The Triton kernels compile for the H200 (sm_90) on a machine without a GPU.

The interpreter runs kernels as Python and accepts code the compiler refuses (a tuple of compile-time
flags passed on with ``*`` loses their constexpr-ness when compiled, for one); compiling each variant
for an sm_90 target here catches that before a device call. The compilation runs in a subprocess
without ``TRITON_INTERPRET`` (under it, ``@triton.jit`` gives interpreted functions that cannot compile).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

FORWARD_POINTERS = dict(Q="*bf16", K="*bf16", V="*bf16", Out="*bf16", Lse="*fp32", Stats="*fp32",
                        KeyMask="*u8", PromptLen="*i64", Seq="*i64")  # fmt: skip
COLUMN_POINTERS = dict(Q="*bf16", K="*bf16", Lse="*fp32", Sum="*fp32", Mean="*fp32", KeyMask="*u8",
                       PromptLen="*i64", Seq="*i64")  # fmt: skip
DECODE_POINTERS = dict(Q="*bf16", K="*bf16", V="*bf16", Out="*bf16", Part="*fp32", Acc="*fp32", Lse="*fp32",
                       Stats="*fp32", Diag="*fp32", Prev="*fp32", Sinks="*fp32", SinkPos="*i64", Sum="*fp32",
                       Count="*fp32", KeyMask="*u8", PromptLen="*i64", KvLen="*i64",
                       Scores="*fp32", Start="*i64")  # fmt: skip


def _compile(fn, constexprs: dict, pointers: dict) -> None:
    import inspect

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {}
    for name in inspect.signature(fn.fn).parameters:
        if name in constexprs:
            sig[name] = "constexpr"
        else:
            sig[name] = pointers.get(name, "fp32" if name in ("scale", "softcap", "log_eps") else "i32")
    src = ASTSource(fn, sig, constexprs)
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 2})


def compile_all() -> None:
    """Every soft-cap x window x key-mask forward variant (Base at d = 64, T1 at d = 96), the split head
    dim (d = 80 as 64 + 16, d = 96 as 64 + 32, Base and T1) and T3 variants."""
    from flashstats_kernels.ops.columns.fused import _columns_kernel
    from flashstats_kernels.ops.forward.fused import _fwd_kernel

    for softcap, window, mask in itertools.product([False, True], repeat=3):
        for rows, d, block_d in ((False, 64, 64), (True, 96, 128)):
            flags = dict(D=d, GROUP=2, HAS_MASK=mask, HAS_SOFTCAP=softcap, HAS_WINDOW=window, ROWS=rows,
                         MMA=0, WHILE=False, VARLEN=False, BLOCK_M=64, BLOCK_N=64,
                         BLOCK_D=block_d, BLOCK_DT=0)  # fmt: skip
            _compile(_fwd_kernel, flags, FORWARD_POINTERS)
    for rows, mask, d, tail in ((False, False, 80, 16), (True, True, 96, 32), (True, False, 192, 64)):
        flags = dict(D=d, GROUP=4, HAS_MASK=mask, HAS_SOFTCAP=mask, HAS_WINDOW=not mask, ROWS=rows, MMA=0,
                     WHILE=False, VARLEN=False, BLOCK_M=128, BLOCK_N=64, BLOCK_D=d - tail,
                     BLOCK_DT=tail)  # fmt: skip
        _compile(_fwd_kernel, flags, FORWARD_POINTERS)
    for split, window in ((0, False), (4, True), (8, False)):
        flags = dict(D=128, GROUP=4, HAS_MASK=False, HAS_SOFTCAP=window, HAS_WINDOW=window, MMA=0,
                     WHILE=False, VARLEN=False, SPLIT_EXP=split, BLOCK_M=64, BLOCK_N=128,
                     BLOCK_D=128)  # fmt: skip
        _compile(_columns_kernel, flags, COLUMN_POINTERS)
    compile_decode()
    compile_logits()


def compile_logits() -> None:
    """The logit statistics' two kernels (a 4096-logit block, top 64; Qwen3's 38 blocks merged)."""
    from flashstats_kernels.ops.logits import fused

    pointers = dict(Logits="*bf16", Targets="*i64", Part="*fp32", Cand="*fp32", Out="*fp32")
    _compile(fused._partials_kernel, dict(BLOCK=4096, K=64), pointers)
    _compile(fused._finish_kernel, dict(BLOCK_P=64, K=64, TOP=50), pointers)


def compile_decode() -> None:
    """The decoding kernels (split with and without the score store and lazy T1 sums, merge with lookups,
    running columns), soft-cap/window on and off."""
    from flashstats_kernels.ops.decode import kernels

    for special in (False, True):
        flags = dict(D=64, GROUP=3, HAS_MASK=special, HAS_SOFTCAP=special, HAS_WINDOW=special, WHILE=False,
                     BLOCK_D=64)  # fmt: skip
        for scores in {special, True}:  # the score store of T3 with and without the soft cap
            # lazy T1 sums (decoding steps) and per-tile ones (chunks of more rows)
            split = dict(flags, ROWS=True, SCORES=scores, MMA=0, BLOCK_M=16, BLOCK_N=64, LAZY=scores)
            _compile(kernels._split_kernel, split, DECODE_POINTERS)
        # SmolLM2's decode (4 rows, 16 columns, all 64 splits at once) and 16-row chunks one split at a
        # time, each with and without the running columns in the merge's launch
        for columns in (False, True):
            merge = dict(
                flags, ROWS=True, LOOKUPS=True, HAS_START=special, COLUMNS=columns, BLOCK_M=16,
                MERGE_M=16 if special else 4, MERGE_D=16, SPLIT_BLOCK=1 if special else 64, COL_N=1024,
            )  # fmt: skip
            _compile(kernels._merge_kernel, merge, DECODE_POINTERS)
        cols = dict(GROUP=3, HAS_MASK=special, HAS_WINDOW=special, BLOCK_M=16, BLOCK_N=512)
        _compile(kernels._columns_kernel, cols, DECODE_POINTERS)


def compile_representatives() -> None:
    """Two cheap variants with every option on: the Base forward and the decoding column program."""
    from flashstats_kernels.ops.decode import kernels
    from flashstats_kernels.ops.forward.fused import _fwd_kernel

    forward = dict(D=64, GROUP=2, HAS_MASK=True, HAS_SOFTCAP=True, HAS_WINDOW=True, ROWS=False, MMA=0,
                   WHILE=False, VARLEN=False, BLOCK_M=64, BLOCK_N=64, BLOCK_D=64, BLOCK_DT=0)  # fmt: skip
    _compile(_fwd_kernel, forward, FORWARD_POINTERS)
    cols = dict(GROUP=3, HAS_MASK=True, HAS_WINDOW=True, BLOCK_M=16, BLOCK_N=512)
    _compile(kernels._columns_kernel, cols, DECODE_POINTERS)


def _compile_in_a_subprocess(function: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    here = str(Path(__file__).parent)
    code = f"import sys; sys.path.insert(0, {here!r}); import test_compile_sm90 as t; t.{function}()"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_kernels_compile_for_sm90_with_every_option_on():
    """The fast default: two variants (a few seconds); the next test compiles every variant."""
    _compile_in_a_subprocess("compile_representatives")


@pytest.mark.slow
def test_kernel_variants_compile_for_sm90():
    _compile_in_a_subprocess("compile_all")
