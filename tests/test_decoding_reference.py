"""Chapter 10 (generating text): the reference against independent oracles, and the hidden checks' cases and judges.

Oracles: masks written out from the definition and ``torch.nn.attention.bias.causal_lower_right``; causal
attention over the whole sequence from ``F.scaled_dot_product_attention(is_causal=True)`` (where top-left
and bottom-right coincide), whose last rows a cached computation must reproduce; ``enable_gqa=True`` and a
loop over heads for grouped-query attention; the formula with ``element_size()`` for the cache's bytes;
``F.scaled_dot_product_attention`` for split-KV attention.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

import solutions.cases.decoding as cases_mod
import solutions.decoding as ref
from grader.checks import Case, MemoryMeter

from .casecheck import assert_generator_is_deterministic_and_labelled

# ---------------------------------------------------------------------------------------------------
# bottom_right_causal_mask


@pytest.mark.parametrize("T_q, T_k", [(0, 0), (0, 3), (1, 1), (1, 5), (3, 3), (2, 7), (5, 9)])
def test_bottom_right_mask_is_the_definition(T_q, T_k):
    m = ref.bottom_right_causal_mask(T_q, T_k)
    assert m.dtype == torch.bool and m.shape == (T_q, T_k)
    assert all(bool(m[i, j]) == (j <= T_k - T_q + i) for i in range(T_q) for j in range(T_k))


@pytest.mark.parametrize("T_q, T_k", [(1, 5), (3, 3), (2, 7), (4, 9)])
def test_bottom_right_mask_is_pytorchs_causal_lower_right(T_q, T_k):
    assert torch.equal(ref.bottom_right_causal_mask(T_q, T_k), causal_lower_right(T_q, T_k)._materialize())


def test_bottom_right_mask_is_top_left_only_when_square():
    assert torch.equal(ref.bottom_right_causal_mask(4, 4), torch.ones(4, 4, dtype=torch.bool).tril())
    assert not torch.equal(ref.bottom_right_causal_mask(2, 4), torch.ones(2, 4, dtype=torch.bool).tril())


def test_bottom_right_mask_device_and_errors():
    assert ref.bottom_right_causal_mask(2, 3, device=torch.device("meta")).device.type == "meta"
    for bad in ((3, 2), (-1, 3), (1, -1)):
        with pytest.raises(ValueError):
            ref.bottom_right_causal_mask(*bad)


# ---------------------------------------------------------------------------------------------------
# cached_attention and decode_step: the last rows of full causal attention


def _full(q, k, v):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)


@pytest.mark.parametrize("batch, T_q, T_k", [((), 1, 1), ((2,), 1, 9), ((2, 3), 4, 10), ((1, 2), 6, 6)])
def test_cached_attention_is_the_last_rows_of_full_causal_attention(batch, T_q, T_k):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*batch, T_k, d, generator=g, dtype=torch.float64) for d in (8, 8, 5))
    out = ref.cached_attention(q[..., T_k - T_q :, :], k, v)
    torch.testing.assert_close(out, _full(q, k, v)[..., T_k - T_q :, :])


def test_cached_attention_equals_sdpa_with_causal_lower_right():
    g = torch.Generator().manual_seed(1)
    q, k, v = (
        torch.randn(2, 2, 3, 8, generator=g),
        torch.randn(2, 2, 11, 8, generator=g),
        torch.randn(2, 2, 11, 4, generator=g),
    )
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(3, 11))
    torch.testing.assert_close(ref.cached_attention(q, k, v), expected, atol=1e-6, rtol=1e-5)


def test_cached_attention_keeps_low_precision_dtypes_and_raises():
    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(2, 1, 8, generator=g), torch.randn(2, 6, 8, generator=g), torch.randn(2, 6, 8, generator=g)
    for dtype in (torch.float16, torch.bfloat16):
        out = ref.cached_attention(q.to(dtype), k.to(dtype), v.to(dtype))
        assert out.dtype == dtype
        torch.testing.assert_close(out.float(), ref.cached_attention(q, k, v), atol=2e-2, rtol=2e-2)
    with pytest.raises(ValueError):
        ref.cached_attention(torch.randn(4, 8), torch.randn(3, 8), torch.randn(3, 8))


@pytest.mark.parametrize("sizes", [[1] * 7, [3, 4], [7], [2, 1, 3, 1], [5, 2]])
def test_decode_step_in_chunks_equals_full_causal_attention(sizes):
    g = torch.Generator().manual_seed(3)
    T = sum(sizes)
    q, k, v = (
        torch.randn(2, 3, T, 8, generator=g),
        torch.randn(2, 3, T, 8, generator=g),
        torch.randn(2, 3, T, 4, generator=g),
    )
    past, outs, start = None, [], 0
    for size in sizes:
        out, past = ref.decode_step(
            q[..., start : start + size, :], k[..., start : start + size, :], v[..., start : start + size, :], past
        )
        outs.append(out)
        start += size
    torch.testing.assert_close(torch.cat(outs, dim=-2).double(), _full(q, k, v), atol=1e-5, rtol=1e-5)
    assert torch.equal(past[0], k) and torch.equal(past[1], v)


def test_decode_step_returns_new_tensors_and_leaves_the_cache_alone():
    q, k, v = torch.randn(1, 2, 4), torch.randn(1, 2, 4), torch.randn(1, 2, 4)
    _, (k_all, v_all) = ref.decode_step(q, k, v)
    assert k_all.data_ptr() != k.data_ptr() and v_all.data_ptr() != v.data_ptr()
    past = (torch.randn(1, 3, 4), torch.randn(1, 3, 4))
    before = [p.clone() for p in past]
    ref.decode_step(q, k, v, past)
    assert all(torch.equal(a, b) for a, b in zip(past, before))
    out_empty, _ = ref.decode_step(q, k, v, (torch.zeros(1, 0, 4), torch.zeros(1, 0, 4)))
    torch.testing.assert_close(out_empty, ref.decode_step(q, k, v)[0])


# ---------------------------------------------------------------------------------------------------
# GroupedQueryAttention


def _heads(module, x):
    B, T, _ = x.shape
    d_head = module.d_head
    q = module.q_proj(x).view(B, T, -1, d_head).transpose(1, 2)
    k = module.k_proj(x).view(B, T, -1, d_head).transpose(1, 2)
    v = module.v_proj(x).view(B, T, -1, d_head).transpose(1, 2)
    return q, k, v


@pytest.mark.parametrize("d_model, h, h_kv", [(32, 8, 2), (24, 6, 3), (16, 4, 4), (24, 6, 1)])
def test_gqa_equals_sdpa_with_enable_gqa(d_model, h, h_kv):
    torch.manual_seed(0)
    m = ref.GroupedQueryAttention(d_model, h, h_kv, bias=True).eval()
    x = torch.randn(2, 7, d_model)
    with torch.no_grad():
        out, (k_cache, v_cache) = m(x)
        q, k, v = _heads(m, x)
        fused = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        expected = m.out_proj(fused.transpose(1, 2).reshape(2, 7, d_model))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert k_cache.shape == (2, h_kv, 7, d_model // h) and torch.equal(k_cache, k) and torch.equal(v_cache, v)


def test_gqa_query_head_i_reads_kv_head_i_over_group():
    torch.manual_seed(1)
    m = ref.GroupedQueryAttention(32, 8, 2).eval()
    x = torch.randn(1, 5, 32)
    with torch.no_grad():
        q, k, v = _heads(m, x)
        heads = [F.scaled_dot_product_attention(q[:, i], k[:, i // 4], v[:, i // 4], is_causal=True) for i in range(8)]
        expected = m.out_proj(torch.stack(heads, dim=1).transpose(1, 2).reshape(1, 5, 32))
        torch.testing.assert_close(m(x)[0], expected, atol=1e-5, rtol=1e-5)


def test_gqa_with_a_cache_equals_one_pass():
    torch.manual_seed(2)
    m = ref.GroupedQueryAttention(32, 4, 2).eval()
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        whole, _ = m(x)
        parts, past = [], None
        for a, b in [(0, 4), (4, 5), (5, 9)]:
            out, past = m(x[:, a:b], past)
            parts.append(out)
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, atol=1e-5, rtol=1e-5)
    assert past[0].shape == (2, 2, 9, 8)


def test_gqa_rejects_heads_that_do_not_divide():
    for bad in ((30, 4, 2), (32, 8, 3), (32, 0, 1)):
        with pytest.raises(ValueError):
            ref.GroupedQueryAttention(*bad)


# ---------------------------------------------------------------------------------------------------
# kv_cache_bytes


@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int8, torch.float8_e4m3fn]
)
def test_kv_cache_bytes_is_the_formula(dtype):
    got = ref.kv_cache_bytes(32, 8, 128, 4096, 3, dtype)
    assert type(got) is int and got == 2 * 32 * 8 * 128 * 4096 * 3 * torch.empty(0, dtype=dtype).element_size()


@pytest.mark.parametrize("dtype, bits", [(torch.uint4, 4), (torch.int4, 4), (torch.uint1, 1), (torch.int7, 7),
                                         (torch.float4_e2m1fn_x2, 4), (torch.quint4x2, 4), (torch.quint2x4, 2)])
def test_kv_cache_bytes_counts_the_bits_of_packed_types(dtype, bits):
    """A packed sub-byte type reports an itemsize of 1: the cache counts its bits per value, whole bytes rounded up."""
    assert dtype.itemsize == 1
    assert ref.kv_cache_bytes(32, 8, 128, 4096, 3, dtype) == 2 * 32 * 8 * 128 * 4096 * 3 * bits // 8
    assert ref.kv_cache_bytes(1, 1, 1, 1, dtype=dtype) == (1 if bits <= 4 else 2)  # 2 values: whole bytes, rounded up
    assert ref.kv_cache_bytes(1, 1, 1, 3, dtype=dtype) == -(-6 * bits // 8)


def test_kv_cache_bytes_of_published_configs_and_errors():
    assert ref.kv_cache_bytes(32, 32, 128, 4096) == 2 * 2**30  # Llama 2 7B, 4k tokens: 2 GiB
    assert ref.kv_cache_bytes(32, 8, 128, 131072) == 16 * 2**30  # Llama 3 8B, 128k tokens: 16 GiB
    assert ref.kv_cache_bytes(32, 8, 128, 0) == 0
    with pytest.raises(ValueError):
        ref.kv_cache_bytes(32, 8, 128, -1)
    with pytest.raises(TypeError):
        ref.kv_cache_bytes(1, 1, 1, 1, dtype="bfloat16")


# ---------------------------------------------------------------------------------------------------
# split_kv_attention


@pytest.mark.parametrize("T_k, n", [(64, 4), (50, 4), (50, 7), (10, 16), (1, 3), (33, 1), (33, 33)])
def test_split_kv_equals_sdpa(T_k, n):
    g = torch.Generator().manual_seed(4)
    q, k, v = (
        torch.randn(2, 3, 2, 8, generator=g),
        torch.randn(2, 3, T_k, 8, generator=g),
        torch.randn(2, 3, T_k, 5, generator=g),
    )
    torch.testing.assert_close(
        ref.split_kv_attention(q, k, v, n), F.scaled_dot_product_attention(q, k, v), atol=1e-6, rtol=1e-5
    )


def test_split_kv_survives_scores_that_overflow_exp():
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 8, generator=g, dtype=torch.float64) * 4
    k = torch.randn(40, 8, generator=g, dtype=torch.float64)
    k[20:30] *= 40.0
    v = torch.randn(40, 4, generator=g, dtype=torch.float64)
    expected = torch.softmax(q @ k.T / math.sqrt(8), dim=-1) @ v
    out = ref.split_kv_attention(q.float(), k.float(), v.float(), 4)
    assert out.isfinite().all()
    torch.testing.assert_close(out.double(), expected, atol=1e-4, rtol=1e-4)


def test_split_kv_dtypes_and_errors():
    g = torch.Generator().manual_seed(6)
    q, k, v = torch.randn(2, 1, 8, generator=g), torch.randn(2, 30, 8, generator=g), torch.randn(2, 30, 8, generator=g)
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        out = ref.split_kv_attention(q.to(dtype), k.to(dtype), v.to(dtype), 4)
        assert out.dtype == dtype
        torch.testing.assert_close(out.float(), F.scaled_dot_product_attention(q, k, v), atol=2e-2, rtol=2e-2)
    for bad in (0, -1):
        with pytest.raises(ValueError):
            ref.split_kv_attention(q, k, v, bad)
    with pytest.raises(ValueError):
        ref.split_kv_attention(q, k[:, :0], v[:, :0], 2)


def test_split_kv_holds_one_chunk_of_scores():
    q, k, v = torch.randn(2, 4, 8), torch.randn(2, 4096, 8), torch.randn(2, 4096, 8)
    meter = MemoryMeter([q, k, v])  # views of the inputs are not new memory
    with meter:
        ref.split_kv_attention(q, k, v, 64)
    full = 2 * 4 * 4096
    assert meter.largest <= full // 8 and meter.peak_live <= full // 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("T_q, d_k, d_v, chunks", [(1, 4, 4, 64), (1, 8, 2, 128), (4, 8, 8, 32), (8, 8, 8, 16),
                                                   (16, 2, 8, 16), (3, 6, 5, 33)])
def test_split_kv_meets_its_stated_bound_where_the_statement_applies_it(T_q, d_k, d_v, chunks, dtype):
    """On the edge of the statement's regime (the fewest and narrowest chunks it allows): no tensor above a
    quarter of the scores, half alive, in every floating dtype."""
    c = 16 * (d_v + 1)
    T_k = c * chunks
    while 16 * c * max(d_k, d_v) > T_q * T_k:
        T_k += c
    n = T_k // c
    assert cases_mod.split_kv_bound_applies(T_q, T_k, d_k, d_v, n)
    assert not cases_mod.split_kv_bound_applies(T_q, T_k, d_k, d_v, n // 2)  # wider chunks: outside
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, T_q, d_k, generator=g).to(dtype), torch.randn(2, T_k, d_k, generator=g).to(dtype),
               torch.randn(2, T_k, d_v, generator=g).to(dtype))
    meter = MemoryMeter([q, k, v])
    with meter:
        ref.split_kv_attention(q, k, v, n)
    full = 2 * T_q * T_k
    assert meter.largest <= full // 4 and meter.peak_live <= full // 2, (meter.largest / full, meter.peak_live / full)


def test_split_kv_memory_cases_are_where_the_statement_bounds_memory():
    for dtype in ("float32", "float16"):
        for case in cases_mod.split_kv_memory_cases(0, dtype):
            q, k, v, n = case.args
            assert cases_mod.split_kv_bound_applies(q.shape[-2], k.shape[-2], k.shape[-1], v.shape[-1], n)
            assert case.max_numel == q.shape[:-1].numel() * k.shape[-2] // 4 and case.max_live == 2 * case.max_numel


# ---------------------------------------------------------------------------------------------------
# the hidden checks' cases and judges


GENERATORS = [
    ("bottom_right_causal_mask_cases", {}),
    ("decode_step_cases", {}),
    ("decode_step_cases", {"dtype": "float16"}),
    ("decode_step_cases", {"dtype": "bfloat16"}),
    ("chunked_sequence_cases", {}),
    ("cached_attention_cases", {}),
    ("cached_attention_cases", {"dtype": "float16"}),
    ("cached_attention_property_cases", {}),
    ("grouped_query_attention_cases", {}),
    ("kv_cache_bytes_cases", {}),
    ("split_kv_attention_cases", {}),
    ("split_kv_attention_cases", {"dtype": "bfloat16"}),
    ("split_kv_memory_cases", {}),
    ("split_kv_memory_cases", {"dtype": "float16"}),
]


@pytest.mark.parametrize("name, params", GENERATORS)
def test_case_generators_are_deterministic_and_labelled(name, params):
    assert_generator_is_deterministic_and_labelled(getattr(cases_mod, name), 0, params)


def test_full_sequence_judges_accept_the_reference_and_reject_top_left():
    cases = cases_mod.chunked_sequence_cases(2)
    cases_mod.equals_full_sequence_attention(cases, [ref.decode_step(*c.args) for c in cases])

    def top_left(q, k_new, v_new, past):  # the mistake: is_causal=True over the cache
        k = k_new if past is None else torch.cat([past[0], k_new], dim=-2)
        v = v_new if past is None else torch.cat([past[1], v_new], dim=-2)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True), (k, v)

    top_left = [top_left(*c.args) for c in cases]
    with pytest.raises(AssertionError, match="bottom-right"):
        cases_mod.equals_full_sequence_attention(cases, top_left)
    rows = cases_mod.cached_attention_property_cases(12)
    cases_mod.equals_full_sequence_rows(rows, [ref.cached_attention(*c.args) for c in rows])
    with pytest.raises(AssertionError, match="bottom-right"):
        cases_mod.equals_full_sequence_rows(
            rows, [F.scaled_dot_product_attention(*c.args, is_causal=True) for c in rows]
        )


def test_judge_rejects_a_cache_in_the_wrong_order():
    cases = [c for c in cases_mod.chunked_sequence_cases(2) if c.args[3] is not None][:2]
    outs = []
    for c in cases:
        out, (k_all, v_all) = ref.decode_step(*c.args)
        T_new = c.args[0].shape[-2]
        outs.append((out, (torch.cat([k_all[..., -T_new:, :], k_all[..., :-T_new, :]], -2), v_all)))
    with pytest.raises(AssertionError, match="in that order"):
        cases_mod.equals_full_sequence_attention(cases, outs)


def test_memory_cases_bound_below_the_score_matrix():
    for case in cases_mod.split_kv_memory_cases(11):
        q, k = case.args[0], case.args[1]
        full = math.prod(q.shape[:-2]) * q.shape[-2] * k.shape[-2]
        assert isinstance(case, Case) and case.max_numel == full // 4 and case.max_live == full // 2
