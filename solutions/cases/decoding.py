"""Hidden-test cases, property judges and the contract table of chapter 10 (generating text).

Generators ``<name>_cases(seed, dtype="float32") -> list[Case]`` draw every tensor from a ``torch.Generator``
seeded with ``seed``; a check of half-precision inputs passes ``dtype="float16"`` or ``"bfloat16"`` and has
its own, wider tolerances (the reference computes in float32 and rounds once; a correct answer computed in
half precision throughout differs by a few units of the last place). Labels name what each case exercises,
so that a student whose code fails one reads why.

Two judges do not trust the reference at all: :func:`equals_full_sequence_attention` rebuilds every row from
causal attention over the whole sequence (``F.scaled_dot_product_attention(is_causal=True)`` on the square
matrix, where top-left and bottom-right coincide), and checks the returned cache; it backs both the
decoding step and the bug hunt. ``split_kv_attention`` is also graded with memory bounds, on long caches split
finely (:func:`split_kv_bound_applies`, as its statement says): the largest tensor allowed is a quarter of the
whole ``(T_q, T_k)`` score matrix of the case, the elements alive at once half of it, so building the matrix,
or keeping every chunk's scores, fails.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from grader.checks import Case
from solutions.cases.families import far_below_qk

_FAR_BELOW = "every allowed score around -3e4, far below -1e4: the future removed (-inf), not given a finite fill"

#: Tolerances of the property judges (float32 and float64 inputs).
ATOL, RTOL = 1e-5, 1e-4
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _strided(x: torch.Tensor) -> torch.Tensor:
    """The same values as ``x``, stored transposed: a non-contiguous view."""
    return x.transpose(-2, -1).contiguous().transpose(-2, -1)


# ---------------------------------------------------------------------------------------------------
# bottom_right_causal_mask


def bottom_right_causal_mask_cases(seed: int) -> list[Case]:
    del seed  # masks are deterministic; the seed is part of the check's signature only
    return [
        Case(args=(1, 1), label="T_q=1, T_k=1"),
        Case(args=(1, 6), label="one new query over 6 keys: it sees every key"),
        Case(args=(3, 3), label="square T_q=T_k=3: the lower triangle"),
        Case(args=(2, 5), label="T_q=2, T_k=5"),
        Case(args=(4, 9), label="T_q=4, T_k=9"),
        Case(args=(0, 4), label="no query: T_q=0, T_k=4"),
        Case(args=(3, 2048), label="3 queries over a long cache of 2048 keys"),
        Case(args=(2, 7), kwargs={"device": "cpu"}, label="T_q=2, T_k=7, device='cpu'"),
        # the meta device: a mask built on the default device and not on the one given is caught without a GPU
        Case(args=(3, 8), kwargs={"device": "meta"}, label="T_q=3, T_k=8, device='meta'"),
        Case(args=(1, 300, torch.device("meta")), label="T_q=1, T_k=300, device=torch.device('meta') positionally"),
        Case(args=(2, 6), again=(), label="called twice with T_q=2, T_k=6, the first mask overwritten in between: "
                                          "a new tensor each call (no cache)"),
        Case(args=(3, 2), raises="ValueError", label="T_q=3 > T_k=2 raises ValueError"),
        Case(args=(-1, 4), raises="ValueError", label="negative T_q raises ValueError"),
    ]


# ---------------------------------------------------------------------------------------------------
# decode_step and the bug hunt (cached_attention)


def _qkv(g: torch.Generator, batch: tuple[int, ...], T_q: int, T_k: int, d_k: int, d_v: int, dtype: torch.dtype,
         scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q (..., T_q, d_k) and k (..., T_k, d_k) scaled by ``scale``, and v (..., T_k, d_v), drawn in that order."""
    q = _randn(g, *batch, T_q, d_k, scale=scale, dtype=dtype)
    k = _randn(g, *batch, T_k, d_k, scale=scale, dtype=dtype)
    return q, k, _randn(g, *batch, T_k, d_v, dtype=dtype)


def _tag(label: str, dtype: torch.dtype) -> str:
    return label if dtype == torch.float32 else f"{label} ({str(dtype).removeprefix('torch.')})"


def decode_step_cases(seed: int, dtype: str = "float32") -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]

    def case(
        batch: tuple[int, ...],
        T_past: int | None,
        T_new: int,
        d_k: int,
        d_v: int,
        label: str,
        scale: float = 1.0,
        past_kw: bool = False,
        layout=None,
        fresh: bool = False,
    ) -> Case:
        q = _randn(g, *batch, T_new, d_k, scale=scale, dtype=dt)
        k_new, v_new = _randn(g, *batch, T_new, d_k, scale=scale, dtype=dt), _randn(g, *batch, T_new, d_v, dtype=dt)
        past = (
            None
            if T_past is None
            else (_randn(g, *batch, T_past, d_k, scale=scale, dtype=dt), _randn(g, *batch, T_past, d_v, dtype=dt))
        )
        if layout is not None:
            q, k_new, v_new, past = layout(q, k_new, v_new, past)
        if past_kw:
            return Case(args=(q, k_new, v_new), kwargs={"past": past}, label=_tag(label, dt), fresh=fresh)
        return Case(args=(q, k_new, v_new) if past is None else (q, k_new, v_new, past), label=_tag(label, dt),
                    fresh=fresh)

    def strided(q, k_new, v_new, past):
        return q, k_new, v_new, (_strided(past[0]), _strided(past[1]))

    def expanded(q, k_new, v_new, past):  # one cache shared by every head: (B, 1, T, d) expanded to (B, H, T, d)
        return q, k_new, v_new, (past[0][:, :1].expand(past[0].shape), past[1][:, :1].expand(past[1].shape))

    cases = [
        case((2, 3), 7, 1, 8, 8, "(B=2, h=3), one new token over a cache of 7"),
        case((2,), None, 5, 4, 4, "no cache (past=None), 5 tokens: plain causal attention"),
        case((2, 2), 6, 4, 8, 5, "(B=2, h=2), a chunk of 4 new tokens over a cache of 6, d_k=8, d_v=5"),
    ]
    if dt != torch.float32:
        return cases
    return cases + [
        case((3,), 5, 2, 4, 6, "3-D inputs (B, T, d): the length axis is -2, not 2"),
        case((2, 2, 2), 3, 2, 4, 4, "5-D inputs (2, 2, 2, T, d)"),
        case((), 4, 3, 4, 4, "2-D inputs (T, d): no batch axes"),
        case((2, 2), 0, 3, 4, 4, "an empty cache (T_past=0) given as tensors"),
        case((1, 2), 5, 1, 4, 4, "past passed as a keyword", past_kw=True),
        case((2, 2), 6, 2, 16, 4, "large scores (entries ~6): a stable softmax", scale=6.0),
        case((2, 2), 8, 3, 8, 8, "the cache is a non-contiguous view (stored transposed)", layout=strided),
        case((2, 3), 5, 1, 4, 4, "the cache is expanded over heads (one tensor, stride 0)", layout=expanded),
        case((2,), 40, 1, 8, 8, "a long cache of 40 tokens, one new token"),
        case((2, 2), None, 3, 4, 4, "no cache (past=None), read after the inputs were overwritten: present holds new tensors, not the caller's k_new and v_new", fresh=True),
        _far_below_decode(g),
        _float64_decode(g),
    ]


def _far_below_decode(g: torch.Generator) -> Case:
    q, k = far_below_qk(g, (2, 2), (2, 2), 3, 7)  # 4 cached tokens, 3 new ones
    v = _randn(g, 2, 2, 7, 4)
    return Case(args=(q, k[..., 4:, :], v[..., 4:, :], (k[..., :4, :], v[..., :4, :])),
                label="a chunk of 3 new tokens over a cache of 4, " + _FAR_BELOW)


def _float64_decode(g: torch.Generator) -> Case:
    dt = torch.float64
    q, k_new, v_new = _randn(g, 2, 2, 3, 4, dtype=dt), _randn(g, 2, 2, 3, 4, dtype=dt), _randn(g, 2, 2, 3, 4, dtype=dt)
    past = (_randn(g, 2, 2, 4, 4, dtype=dt), _randn(g, 2, 2, 4, 4, dtype=dt))
    return Case(args=(q, k_new, v_new, past), label="float64: the result stays float64")


def chunked_sequence_cases(seed: int) -> list[Case]:
    """One sequence per group, fed in chunks: each case is a chunk with the exact prefix as its past."""
    g = torch.Generator().manual_seed(seed)
    cases = []
    for batch, T, d_k, d_v, sizes in [
        ((2, 2), 8, 4, 4, [1] * 8),
        ((2,), 10, 8, 5, [3, 1, 4, 2]),
        ((1, 3), 6, 4, 4, [6]),
        ((2, 2), 9, 4, 3, [2, 5, 2]),
    ]:
        q, k, v = _randn(g, *batch, T, d_k, scale=2.0), _randn(g, *batch, T, d_k, scale=2.0), _randn(g, *batch, T, d_v)
        start = 0
        for size in sizes:
            stop = start + size
            past = None if start == 0 else (k[..., :start, :].clone(), v[..., :start, :].clone())
            cases.append(
                Case(
                    args=(
                        q[..., start:stop, :].clone(),
                        k[..., start:stop, :].clone(),
                        v[..., start:stop, :].clone(),
                        past,
                    ),
                    label=f"batch {batch}, T={T} fed in chunks {sizes}: tokens {start}..{stop - 1}",
                )
            )
            start = stop
    return cases


def _full_rows(q_new: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor) -> torch.Tensor:
    """The last ``T_new`` rows of causal self-attention over the whole sequence, from PyTorch's kernel on the
    square matrix (the earlier queries are zeros: a row depends on its own query only)."""
    T_new, T = q_new.shape[-2], k_all.shape[-2]
    q_full = torch.cat([torch.zeros(*q_new.shape[:-2], T - T_new, q_new.shape[-1], dtype=q_new.dtype), q_new], dim=-2)
    out = F.scaled_dot_product_attention(q_full.double(), k_all.double(), v_all.double(), is_causal=True)
    return out[..., T - T_new :, :]


def equals_full_sequence_attention(cases: list[Case], outputs: list) -> None:
    """``decode_step``: each chunk's output is its rows of full causal attention, and ``present`` is the cache
    with the chunk appended along the length axis."""
    for case, got in zip(cases, outputs):
        q, k_new, v_new, past = case.args
        k_all = k_new if past is None else torch.cat([past[0], k_new], dim=-2)
        v_all = v_new if past is None else torch.cat([past[1], v_new], dim=-2)
        where = f"case '{case.label}'"
        assert isinstance(got, tuple) and len(got) == 2, f"{where}: should return (out, present)"
        out, present = got
        assert isinstance(present, tuple) and len(present) == 2, f"{where}: present should be (k_all, v_all)"
        for name, have, want in (("present[0] (keys)", present[0], k_all), ("present[1] (values)", present[1], v_all)):
            assert isinstance(have, torch.Tensor) and tuple(have.shape) == tuple(want.shape), (
                f"{where}: {name} should have shape {tuple(want.shape)} (the cache, then the new tokens, along the "
                f"length axis -2), got {tuple(have.shape) if isinstance(have, torch.Tensor) else type(have).__name__}"
            )
            assert torch.equal(have, want), (
                f"{where}: {name} should be the past followed by the new tokens along the length axis (-2), "
                "in that order"
            )
        _assert_rows(where, out, _full_rows(q, k_all, v_all))


def _assert_rows(where: str, out, expected: torch.Tensor) -> None:
    assert isinstance(out, torch.Tensor), f"{where}: the output should be a tensor"
    assert tuple(out.shape) == tuple(expected.shape), (
        f"{where}: the output has shape {tuple(out.shape)}, expected (..., T_new, d_v) = {tuple(expected.shape)}"
    )
    if not torch.allclose(out.double(), expected, atol=ATOL, rtol=RTOL):
        worst = (out.double() - expected).abs().amax(dim=-1).reshape(-1, expected.shape[-2]).amax(dim=0)
        row = int(worst.argmax())
        raise AssertionError(
            f"{where}: new token {row} differs from causal attention over the whole sequence by "
            f"{float(worst[row]):.3g}. The i-th of T_q new queries sits at position T_k - T_q + i and must see "
            "every key up to there: align the causal mask bottom-right (is_causal=True and tril() of a "
            "(T_q, T_k) matrix align it top-left)"
        )


def cached_attention_cases(seed: int, dtype: str = "float32") -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]

    def case(batch: tuple[int, ...], T_q: int, T_k: int, d_k: int, d_v: int, label: str, scale: float = 1.0) -> Case:
        return Case(args=_qkv(g, batch, T_q, T_k, d_k, d_v, dt, scale), label=_tag(label, dt))

    cases = [
        case((2, 2), 1, 8, 4, 4, "(B=2, h=2), one new query over a cache of 8 (it sees every key)"),
        case((2,), 3, 9, 8, 5, "batch 2, a chunk of 3 new queries over 9 keys, d_k=8, d_v=5"),
    ]
    if dt != torch.float32:
        return cases
    return cases + [
        case((2, 3), 5, 5, 4, 4, "T_q = T_k = 5: no cache, plain causal attention"),
        case((), 1, 1, 4, 2, "one token, nothing cached before it (T_q = T_k = 1)"),
        case((2, 2), 2, 6, 4, 4, "large scores (entries ~6)", scale=6.0),
        case((3,), 4, 64, 8, 8, "a long cache of 64 keys, 4 new queries"),
        Case(args=(*far_below_qk(g, (2,), (2,), 3, 8), _randn(g, 2, 8, 4)),
             label="3 new queries over 8 keys, " + _FAR_BELOW),
        Case(
            args=(
                _randn(g, 2, 2, 1, 4, dtype=torch.float64),
                _randn(g, 2, 2, 6, 4, dtype=torch.float64),
                _randn(g, 2, 2, 6, 4, dtype=torch.float64),
            ),
            label="float64: the result stays float64",
        ),
        Case(
            args=(_randn(g, 2, 3, 4), _randn(g, 2, 2, 4), _randn(g, 2, 2, 4)),
            raises="ValueError",
            label="T_q=3 > T_k=2 raises ValueError",
        ),
    ]


def cached_attention_property_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    return [
        Case(
            args=(_randn(g, *b, tq, d, scale=2.0), _randn(g, *b, tk, d, scale=2.0), _randn(g, *b, tk, dv)),
            label=f"batch {b}, {tq} new queries over {tk} keys",
        )
        for b, tq, tk, d, dv in [((2,), 1, 7, 4, 4), ((2, 2), 3, 10, 8, 4), ((1,), 6, 6, 4, 4), ((2, 2), 2, 3, 4, 5)]
    ]


def equals_full_sequence_rows(cases: list[Case], outputs: list) -> None:
    """``cached_attention``: each output is the last ``T_q`` rows of causal attention over the sequence."""
    for case, out in zip(cases, outputs):
        q, k, v = case.args
        _assert_rows(f"case '{case.label}'", out, _full_rows(q, k, v))


# ---------------------------------------------------------------------------------------------------
# GroupedQueryAttention


def grouped_query_attention_cases(seed: int) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def case(
        d_model: int,
        h: int,
        h_kv: int,
        B: int,
        T: int,
        T_past: int | None,
        label: str,
        bias: bool | None = None,
        past_kw: bool = False,
        dtype: str | None = None,
        twice: bool = False,
    ) -> Case:
        dt = getattr(torch, dtype) if dtype else torch.float32
        x = _randn(g, B, T, d_model, dtype=dt)
        init_kwargs = {} if bias is None else {"bias": bias}
        more = {"module_dtype": dtype, "again": (_randn(g, B, T, d_model, dtype=dt),) if twice else None}
        if T_past is None:
            return Case(init=(d_model, h, h_kv), init_kwargs=init_kwargs, args=(x,), label=label, **more)
        d_head = d_model // h
        past = (_randn(g, B, h_kv, T_past, d_head, dtype=dt), _randn(g, B, h_kv, T_past, d_head, dtype=dt))
        if past_kw:
            return Case(init=(d_model, h, h_kv), init_kwargs=init_kwargs, args=(x,), kwargs={"past": past}, label=label,
                        **more)
        return Case(init=(d_model, h, h_kv), init_kwargs=init_kwargs, args=(x, past), label=label, **more)

    return [
        case(32, 8, 2, 2, 6, None, "GQA d_model=32, 8 query heads, 2 kv heads (groups of 4), T=6, no cache"),
        case(24, 6, 3, 2, 5, None, "GQA d_model=24, 6 query heads, 3 kv heads (groups of 2)"),
        case(16, 4, 4, 2, 5, None, "MHA: n_kv_heads = n_heads = 4"),
        case(24, 6, 1, 2, 4, None, "MQA: one kv head shared by 6 query heads"),
        case(32, 8, 4, 2, 1, 9, "GQA, one new token over a cache of 9 (8 heads, 4 kv heads)"),
        case(32, 4, 2, 1, 3, 5, "GQA, a chunk of 3 tokens over a cache of 5"),
        case(16, 4, 2, 2, 2, 4, "the cache passed as past=... keyword", past_kw=True),
        case(24, 6, 2, 2, 4, None, "bias=True", bias=True),
        case(16, 4, 2, 3, 1, None, "T=1, no cache: a single token"),
        case(16, 8, 2, 1, 12, None, "d_head=2, T=12"),
        case(32, 8, 2, 2, 5, None, "a float64 module and input, no cache", dtype="float64"),
        case(32, 8, 4, 2, 2, 6, "a float64 module, a float64 cache of 6, 2 new tokens", dtype="float64"),
        case(24, 6, 2, 2, 5, None, "one module called twice with past=None, on another x of the same shape, the first "
                                   "output overwritten in between", twice=True),
        Case(
            init=(30, 4, 2),
            state={},
            args=(_randn(g, 1, 2, 30),),
            raises="ValueError",
            label="n_heads=4 does not divide d_model=30: ValueError",
        ),
        Case(
            init=(32, 8, 3),
            state={},
            args=(_randn(g, 1, 2, 32),),
            raises="ValueError",
            label="n_kv_heads=3 does not divide n_heads=8: ValueError",
        ),
    ]


# ---------------------------------------------------------------------------------------------------
# kv_cache_bytes


def kv_cache_bytes_cases(seed: int) -> list[Case]:
    del seed
    return [
        Case(args=(32, 32, 128, 4096), label="Llama 2 7B (MHA: 32 layers, 32 kv heads, d_head 128), 4096 tokens, bf16"),
        Case(args=(32, 8, 128, 131072), label="Llama 3 8B (GQA: 8 kv heads), 128k tokens"),
        Case(args=(32, 1, 64, 2048), label="Falcon-7B (MQA: 1 kv head, d_head 64), 2048 tokens"),
        Case(args=(2, 4, 16, 100, 8), label="batch=8 positional"),
        Case(args=(2, 4, 16, 100), kwargs={"batch": 3, "dtype": torch.float32}, label="batch=3, dtype=float32"),
        Case(args=(4, 2, 64, 10), kwargs={"dtype": torch.float16}, label="float16 (2 bytes)"),
        Case(args=(4, 2, 64, 10), kwargs={"dtype": torch.float64}, label="float64 (8 bytes)"),
        Case(args=(4, 2, 64, 10), kwargs={"dtype": torch.int8}, label="an int8 (quantised) cache: 1 byte"),
        Case(args=(4, 2, 64, 10), kwargs={"dtype": torch.float8_e4m3fn}, label="a float8_e4m3fn cache: 1 byte"),
        Case(args=(32, 8, 128, 4096), kwargs={"dtype": torch.uint4},
             label="a packed 4-bit cache (torch.uint4, itemsize 1): half a byte per value"),
        Case(args=(4, 2, 64, 10), kwargs={"dtype": torch.int4}, label="torch.int4: 4 bits per value"),
        Case(args=(4, 2, 64, 10), kwargs={"dtype": torch.float4_e2m1fn_x2},
             label="torch.float4_e2m1fn_x2 (two 4-bit values per element): 4 bits per value"),
        Case(args=(4, 2, 64, 10), kwargs={"dtype": torch.int2}, label="torch.int2: 2 bits per value"),
        Case(args=(1, 1, 1, 1), kwargs={"dtype": torch.uint1},
             label="torch.uint1, one token: 2 bits round up to 1 byte"),
        Case(args=(1, 1, 3, 1), kwargs={"dtype": torch.int3},
             label="torch.int3, d_head=3: 18 bits round up to 3 bytes"),
        Case(args=(80, 8, 128, 1_000_000, 64), label="huge: 80 layers, 1M tokens, batch 64 (no overflow)"),
        Case(args=(32, 8, 128, 0), label="seq_len=0: an empty cache takes 0 bytes"),
        Case(args=(32, 8, 128, -1), raises="ValueError", label="negative seq_len raises ValueError"),
        Case(args=(-2, 8, 128, 10), raises="ValueError", label="negative n_layers raises ValueError"),
    ]


# ---------------------------------------------------------------------------------------------------
# split_kv_attention


def split_kv_attention_cases(seed: int, dtype: str = "float32") -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]

    def case(
        batch: tuple[int, ...], T_q: int, T_k: int, d_k: int, d_v: int, n: int, label: str, scale: float = 1.0
    ) -> Case:
        return Case(args=(*_qkv(g, batch, T_q, T_k, d_k, d_v, dt, scale), n), label=_tag(label, dt))

    cases = [
        case((2, 2), 1, 64, 8, 8, 4, "(B=2, h=2), one query, 64 keys in 4 chunks of 16"),
        case((2,), 3, 50, 4, 6, 4, "50 keys in 4 splits: chunks of 13, the last of 11"),
    ]
    if dt != torch.float32:
        return cases
    peaked = _randn(g, 2, 40, 8, scale=1.0)
    peaked[:, 20:30] *= 40.0  # chunk 2 of 4 holds scores ~1e3: exp(lse) overflows in float32
    q_peak = _randn(g, 2, 2, 8, scale=4.0)
    return cases + [
        case((2,), 2, 10, 4, 4, 16, "n_splits=16 > T_k=10 (chunks of one key)"),
        case((2, 2), 2, 12, 4, 4, 1, "n_splits=1: one chunk, plain attention"),
        case((2,), 1, 7, 4, 4, 7, "n_splits = T_k = 7"),
        case((), 4, 30, 8, 3, 3, "2-D inputs (T, d), d_k=8, d_v=3"),
        case((2, 2), 3, 48, 8, 8, 5, "large scores (entries ~5), 5 splits", scale=5.0),
        Case(
            args=(q_peak, peaked, _randn(g, 2, 40, 4), 4),
            label="one chunk's scores ~1e3, the others ~10: combine by log-sum-exp with the max subtracted",
        ),
        Case(
            args=(
                _randn(g, 2, 2, 2, 8, dtype=torch.float64),
                _randn(g, 2, 2, 33, 8, dtype=torch.float64),
                _randn(g, 2, 2, 33, 4, dtype=torch.float64),
                4,
            ),
            label="float64: the result stays float64",
        ),
        Case(
            args=(_randn(g, 2, 3, 1, 8), _strided(_randn(g, 2, 3, 24, 8)), _strided(_randn(g, 2, 3, 24, 4)), 3),
            label="k and v are non-contiguous views (stored transposed)",
        ),
        Case(
            args=(
                _randn(g, 2, 4, 1, 8),
                _randn(g, 2, 1, 24, 8).expand(2, 4, 24, 8),
                _randn(g, 2, 1, 24, 8).expand(2, 4, 24, 8),
                4,
            ),
            label="k and v expanded over 4 heads (stride 0, as a shared kv head)",
        ),
        Case(
            args=(_randn(g, 1, 8), _randn(g, 5, 8), _randn(g, 5, 8), 0),
            raises="ValueError",
            label="n_splits=0 raises ValueError",
        ),
    ]


def split_kv_bound_applies(T_q: int, T_k: int, d_k: int, d_v: int, n_splits: int) -> bool:
    """Whether the statement's memory bound applies: a long cache split finely. With ``c = ceil(T_k / n_splits)``
    keys per chunk: at least 16 chunks (``T_k >= 16 c``: a chunk's scores are at most a sixteenth of the score
    matrix), chunks of at least ``16 (d_v + 1)`` keys (every chunk's output and log-sum-exp together at most a
    sixteenth), and ``16 c max(d_k, d_v) <= T_q T_k`` (a chunk of the cache, converted, at most a sixteenth).
    Elsewhere the partial outputs alone (the chapter's demo: 256 splits of 64 keys, d_v = 64) or one chunk of the
    cache can outgrow a quarter of the scores, and no bound is graded."""
    c = -(-T_k // n_splits)
    return T_k >= 16 * c and c >= 16 * (d_v + 1) and 16 * c * max(d_k, d_v) <= T_q * T_k


#: The memory cases: (leading axes, T_q, T_k, d_k = d_v, n_splits, dtype), each on the edge of
#: :func:`split_kv_bound_applies` (one of its inequalities an equality). Few enough chunks (at most 64) that the
#: Python objects a correct answer keeps per chunk (its partials in lists, and the meter's own record of each
#: tensor, about 2 KB a chunk) stay far inside the grader's allowance for allocations outside torch.
SPLIT_KV_MEMORY_SHAPES = [
    ((1, 2), 4, 4608, 8, 32, "float32"),  # 32 chunks of 144 = 16 (d_v + 1) keys; 16 c d = T_q T_k
    ((4,), 1, 5120, 4, 64, "float32"),  # one query (decoding): 64 chunks of 80 = 16 (d_v + 1); 16 c d = T_k
    ((2,), 8, 2304, 8, 16, "float16"),  # 16 chunks of 144 in float16: the cache must not be converted at once
]


def split_kv_memory_cases(seed: int, dtype: str = "float32") -> list[Case]:
    """Long caches split finely (:func:`split_kv_bound_applies`), those of :data:`SPLIT_KV_MEMORY_SHAPES` in
    ``dtype``: the largest tensor may be a quarter of one case's (T_q, T_k) scores, the new tensors alive at once
    half of them."""
    g = torch.Generator().manual_seed(seed)
    cases = []
    for batch, T_q, T_k, d, n, name in SPLIT_KV_MEMORY_SHAPES:
        if name != dtype:
            continue
        dtype_ = DTYPES[name]
        assert split_kv_bound_applies(T_q, T_k, d, d, n), (batch, T_q, T_k, d, n)
        full = math.prod(batch) * T_q * T_k
        cases.append(
            Case(
                args=(*_qkv(g, batch, T_q, T_k, d, d, dtype_), n),
                max_numel=full // 4,
                max_live=full // 2,
                label=_tag(f"memory: batch {batch}, T_q={T_q}, T_k={T_k}, d={d}, {n} splits: no tensor above "
                           f"{full // 4:,} elements (a quarter of the score matrix)", dtype_),
            )
        )
    return cases


# ---------------------------------------------------------------------------------------------------
# the contract table: every clause of every statement, and the hidden cases that exercise it

CONTRACT = {
    "bottom_right_causal_mask": {
        "returns a bool (T_q, T_k) tensor": ["T_q=1, T_k=1", "T_q=2, T_k=5", "T_q=4, T_k=9"],
        "query i may attend to keys j <= T_k - T_q + i (bottom-right alignment)": [
            "T_q=2, T_k=5",
            "T_q=4, T_k=9",
            "3 queries over a long cache of 2048 keys",
        ],
        "the last query sees every key": ["one new query over 6 keys: it sees every key"],
        "T_q == T_k gives the lower triangle, diagonal included": ["square T_q=T_k=3: the lower triangle"],
        "T_q = 0 gives an empty (0, T_k) mask": ["no query: T_q=0, T_k=4"],
        "long caches (cheap function)": ["3 queries over a long cache of 2048 keys"],
        "made on `device` when one is given": ["T_q=2, T_k=7, device='cpu'", "T_q=3, T_k=8, device='meta'",
                                               "T_q=1, T_k=300, device=torch.device('meta') positionally"],
        "returns a new tensor (course rule: functions return new tensors)":
            ["called twice with T_q=2, T_k=6, the first mask overwritten in between: a new tensor each call (no cache)"],
        "ValueError when T_q > T_k": ["T_q=3 > T_k=2 raises ValueError"],
        "ValueError for a negative length": ["negative T_q raises ValueError"],
        "dtypes of the inputs": "not gradable: the inputs are two integers; the mask is always bool",
    },
    "decode_step": {
        "out is (..., T_new, d_v), causal with bottom-right alignment over past + new": [
            "(B=2, h=3), one new token over a cache of 7",
            "(B=2, h=2), a chunk of 4 new tokens over a cache of 6, d_k=8, d_v=5",
        ],
        "past=None is no cache: plain causal attention over the new tokens": [
            "no cache (past=None), 5 tokens: plain causal attention"
        ],
        "an empty cache (T_past = 0) is the same as none": ["an empty cache (T_past=0) given as tensors"],
        "present = (k_all, v_all): the cache, then the new tokens, along the length axis -2": [
            "3-D inputs (B, T, d): the length axis is -2, not 2",
            "5-D inputs (2, 2, 2, T, d)",
            "batch (2,), T=10 fed in chunks [3, 1, 4, 2]: tokens 4..7",
        ],
        "any number of leading axes": [
            "3-D inputs (B, T, d): the length axis is -2, not 2",
            "5-D inputs (2, 2, 2, T, d)",
            "2-D inputs (T, d): no batch axes",
        ],
        "d_k may differ from d_v": ["(B=2, h=2), a chunk of 4 new tokens over a cache of 6, d_k=8, d_v=5"],
        "the future removed (-inf), whatever the scores: every allowed score far below -1e4 too": [
            "a chunk of 3 new tokens over a cache of 4, " + _FAR_BELOW],
        "present is new tensors, never the caller's k_new and v_new (past=None)": ["no cache (past=None), read after the inputs were overwritten: present holds new tensors, not the caller's k_new and v_new"],
        "feeding a sequence token by token equals full causal attention": [
            "batch (2, 2), T=8 fed in chunks [1, 1, 1, 1, 1, 1, 1, 1]: tokens 7..7"
        ],
        "feeding it in chunks of any sizes equals full causal attention": [
            "batch (2,), T=10 fed in chunks [3, 1, 4, 2]: tokens 0..2",
            "batch (2, 2), T=9 fed in chunks [2, 5, 2]: tokens 2..6",
            "batch (1, 3), T=6 fed in chunks [6]: tokens 0..5",
        ],
        "past may be passed by keyword": ["past passed as a keyword"],
        "float16, bfloat16, float32, float64 (result in the input's dtype)": [
            "(B=2, h=3), one new token over a cache of 7 (float16)",
            "(B=2, h=2), a chunk of 4 new tokens over a cache of 6, d_k=8, d_v=5 (bfloat16)",
            "(B=2, h=3), one new token over a cache of 7",
            "float64: the result stays float64",
        ],
        "extreme values: large scores, a stable softmax": ["large scores (entries ~6): a stable softmax"],
        "non-contiguous and expanded caches": [
            "the cache is a non-contiguous view (stored transposed)",
            "the cache is expanded over heads (one tensor, stride 0)",
        ],
        "long caches": ["a long cache of 40 tokens, one new token"],
        "inputs (the cache included) are left unchanged": [
            "the cache is expanded over heads (one tensor, stride 0)",
            "(B=2, h=3), one new token over a cache of 7",
        ],
    },
    "GroupedQueryAttention": {
        "submodules q_proj, k_proj, v_proj (n_kv_heads * d_head outputs), out_proj": [
            "GQA d_model=32, 8 query heads, 2 kv heads (groups of 4), T=6, no cache"
        ],
        "query head i uses kv head i // (n_heads // n_kv_heads)": [
            "GQA d_model=32, 8 query heads, 2 kv heads (groups of 4), T=6, no cache",
            "GQA d_model=24, 6 query heads, 3 kv heads (groups of 2)",
        ],
        "n_kv_heads == n_heads is multi-head attention": ["MHA: n_kv_heads = n_heads = 4"],
        "n_kv_heads == 1 is multi-query attention": ["MQA: one kv head shared by 6 query heads"],
        "causal self-attention over the cached tokens and x (bottom-right)": [
            "GQA, one new token over a cache of 9 (8 heads, 4 kv heads)",
            "GQA, a chunk of 3 tokens over a cache of 5",
        ],
        "present = (k, v), each (B, n_kv_heads, T_total, d_head), not repeated per query head": [
            "GQA, one new token over a cache of 9 (8 heads, 4 kv heads)",
            "MQA: one kv head shared by 6 query heads",
        ],
        "past may be passed by keyword": ["the cache passed as past=... keyword"],
        "bias=True gives every projection a bias": ["bias=True"],
        "T=1 and small heads": ["T=1, no cache: a single token", "d_head=2, T=12"],
        "ValueError when n_heads does not divide d_model": ["n_heads=4 does not divide d_model=30: ValueError"],
        "ValueError when n_kv_heads does not divide n_heads": ["n_kv_heads=3 does not divide n_heads=8: ValueError"],
        "equals F.scaled_dot_product_attention(enable_gqa=True) on the same projections": [
            "GQA d_model=32, 8 query heads, 2 kv heads (groups of 4), T=6, no cache",
            "MQA: one kv head shared by 6 query heads",
        ],  # the reference equals enable_gqa: test_decoding_reference.py
        "float64 (the module converted, its input and cache in float64)": [
            "a float64 module and input, no cache", "a float64 module, a float64 cache of 6, 2 new tokens"],
        "float16, bfloat16": "not gradable: the exercise's one check compares at float32 tolerances; half "
        "precision is graded in decode_step",
        "no state kept between calls (the cache is what past and present carry)": [
            "one module called twice with past=None, on another x of the same shape, the first output overwritten "
            "in between"],
    },
    "kv_cache_bytes": {
        "= 2 * layers * kv heads * d_head * tokens * batch * element size": [
            "Llama 2 7B (MHA: 32 layers, 32 kv heads, d_head 128), 4096 tokens, bf16",
            "Llama 3 8B (GQA: 8 kv heads), 128k tokens",
            "Falcon-7B (MQA: 1 kv head, d_head 64), 2048 tokens",
        ],
        "batch defaults to 1 and multiplies": ["batch=8 positional", "batch=3, dtype=float32"],
        "dtype defaults to bfloat16; its element size in bytes counts": [
            "Llama 2 7B (MHA: 32 layers, 32 kv heads, d_head 128), 4096 tokens, bf16",
            "batch=3, dtype=float32",
            "float16 (2 bytes)",
            "float64 (8 bytes)",
        ],
        "any torch dtype, integer caches included": ["an int8 (quantised) cache: 1 byte",
                                                     "a float8_e4m3fn cache: 1 byte"],
        "packed sub-byte types count their bits per value (uint1-7, int1-7, float4_e2m1fn_x2, ...), not itemsize": [
            "a packed 4-bit cache (torch.uint4, itemsize 1): half a byte per value", "torch.int4: 4 bits per value",
            "torch.float4_e2m1fn_x2 (two 4-bit values per element): 4 bits per value", "torch.int2: 2 bits per value"],
        "the total is rounded up to whole bytes": ["torch.uint1, one token: 2 bits round up to 1 byte",
                                                   "torch.int3, d_head=3: 18 bits round up to 3 bytes"],
        "the scales of a quantised cache are not counted":
            "not gradable: the function takes no scale layout; the statement says what is left out",
        "returns a Python int, exact for huge caches": ["huge: 80 layers, 1M tokens, batch 64 (no overflow)"],
        "seq_len=0 gives 0": ["seq_len=0: an empty cache takes 0 bytes"],
        "ValueError for a negative count": [
            "negative seq_len raises ValueError",
            "negative n_layers raises ValueError",
        ],
    },
    "split_kv_attention": {
        "exact non-causal attention of q over k, v": [
            "(B=2, h=2), one query, 64 keys in 4 chunks of 16",
            "n_splits=1: one chunk, plain attention",
        ],
        "contiguous chunks; the last may be shorter": ["50 keys in 4 splits: chunks of 13, the last of 11"],
        "n_splits larger than T_k is allowed": ["n_splits=16 > T_k=10 (chunks of one key)", "n_splits = T_k = 7"],
        "partial results combined exactly by their log-sum-exp (max subtracted)": [
            "one chunk's scores ~1e3, the others ~10: combine by log-sum-exp with the max subtracted",
            "large scores (entries ~5), 5 splits",
        ],
        "any number of leading axes; d_k may differ from d_v": [
            "2-D inputs (T, d), d_k=8, d_v=3",
            "(B=2, h=2), one query, 64 keys in 4 chunks of 16",
        ],
        "float16, bfloat16, float32, float64 (result in q's dtype)": [
            "(B=2, h=2), one query, 64 keys in 4 chunks of 16 (float16)",
            "50 keys in 4 splits: chunks of 13, the last of 11 (bfloat16)",
            "(B=2, h=2), one query, 64 keys in 4 chunks of 16",
            "float64: the result stays float64",
        ],
        "non-contiguous and expanded k, v": [
            "k and v are non-contiguous views (stored transposed)",
            "k and v expanded over 4 heads (stride 0, as a shared kv head)",
        ],
        "on long caches split finely (>= 16 chunks of >= 16 (d_v + 1) keys, a chunk of the cache at most a "
        "sixteenth of the scores), in every floating dtype: no tensor above a quarter of the score matrix, half "
        "of it alive at once (never builds the (T_q, T_k) scores, nor keeps every chunk's scores)": ["memory"],
        "keeping each chunk's output and log-sum-exp is fine there (in lists too)": [
            "memory: batch (4,), T_q=1, T_k=5120, d=4, 64 splits: no tensor above 5,120 elements (a quarter "
            "of the score matrix)"
        ],
        "does not copy or convert the whole cache at once": [
            "memory: batch (2,), T_q=8, T_k=2304, d=8, 16 splits: no tensor above 9,216 elements (a quarter "
            "of the score matrix) (float16)"
        ],
        "no memory bound with fewer or wider chunks":
            "not gradable: nothing is bounded there (the partial outputs alone can outgrow the fractions)",
        "does not call F.scaled_dot_product_attention": ["ban:torch.nn.functional.scaled_dot_product_attention"],
        "ValueError when n_splits < 1": ["n_splits=0 raises ValueError"],
    },
    "cached_attention": {
        "row i equals row T_k - T_q + i of causal attention over the whole sequence": [
            "batch (2,), 1 new queries over 7 keys",
            "batch (2, 2), 3 new queries over 10 keys",
            "batch (2, 2), 2 new queries over 3 keys",
        ],
        "one new query attends to every cached key": [
            "(B=2, h=2), one new query over a cache of 8 (it sees every key)"
        ],
        "a chunk of new queries: bottom-right causal among them": [
            "batch 2, a chunk of 3 new queries over 9 keys, d_k=8, d_v=5"
        ],
        "the masked keys removed (-inf), whatever the scores: every allowed score far below -1e4 too": [
            "3 new queries over 8 keys, " + _FAR_BELOW],
        "T_q = T_k is plain causal attention": [
            "T_q = T_k = 5: no cache, plain causal attention",
            "batch (1,), 6 new queries over 6 keys",
        ],
        "float16, bfloat16, float32, float64": [
            "(B=2, h=2), one new query over a cache of 8 (it sees every key) (float16)",
            "batch 2, a chunk of 3 new queries over 9 keys, d_k=8, d_v=5 (bfloat16)",
            "float64: the result stays float64",
        ],
        "extreme values: large scores": ["large scores (entries ~6)"],
        "long caches": ["a long cache of 64 keys, 4 new queries"],
        "ValueError when T_q > T_k": ["T_q=3 > T_k=2 raises ValueError"],
    },
}
