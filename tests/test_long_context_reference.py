"""solutions/long_context.py against independent oracles: explicit rotation matrices for RoPE, the paper's
slope rule written out for ALiBi, masks built by loops, the explicit quadratic form for linear attention, and
full-sequence attention for the cached decoder."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from grader.checks import MemoryMeter
from solutions.long_context import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    apply_rope_half,
    half_to_interleaved,
    interleaved_to_half,
    linear_attention,
    rope_cached_attention,
    sliding_window_attention,
    sliding_window_mask,
)


def rotation_matrix(position: int, d: int, base: float = 10000.0) -> torch.Tensor:
    """Block-diagonal (d, d) float64 matrix with one 2x2 rotation by position * base^(-2i/d) per pair."""
    R = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        a = position * base ** (-2 * i / d)
        R[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[math.cos(a), -math.sin(a)],
                                                            [math.sin(a), math.cos(a)]], dtype=torch.float64)
    return R


def test_rope_is_a_rotation_matrix_per_position():
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    positions = torch.tensor([0, 1, 7, 30, 1000])
    out = apply_rope(x, positions)
    for t, p in enumerate(positions.tolist()):
        expected = x[:, t] @ rotation_matrix(p, 8).T
        torch.testing.assert_close(out[:, t], expected, atol=1e-12, rtol=1e-12)


def test_rope_base_and_dtypes():
    x = torch.randn(4, 6, dtype=torch.float64)
    positions = torch.arange(4)
    out = apply_rope(x, positions, base=100.0)
    for t in range(4):
        torch.testing.assert_close(out[t], rotation_matrix(t, 6, base=100.0) @ x[t])
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        got = apply_rope(x.to(dtype), positions)
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), apply_rope(x, positions), atol=3e-2, rtol=2e-2)


def test_rope_scores_depend_on_the_offset_only():
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    def score(m, n):
        return float(apply_rope(q[None], torch.tensor([m]))[0] @ apply_rope(k[None], torch.tensor([n]))[0])
    assert score(5, 2) == pytest.approx(score(103, 100), abs=1e-10)
    assert score(0, 0) == pytest.approx(float(q @ k), abs=1e-12)
    assert score(5, 2) != pytest.approx(score(2, 5), abs=1e-3)


def test_rotate_half_is_the_same_up_to_a_permutation():
    x = torch.randn(2, 7, 12)
    positions = torch.arange(3, 10)
    to_half, to_inter = interleaved_to_half(12), half_to_interleaved(12)
    torch.testing.assert_close(apply_rope_half(x[..., to_half], positions)[..., to_inter], apply_rope(x, positions))
    assert not torch.allclose(apply_rope_half(x, positions), apply_rope(x, positions), atol=1e-3)


def test_rope_leaves_its_input_and_rejects_bad_shapes():
    x = torch.randn(3, 4)
    before = x.clone()
    apply_rope(x, torch.arange(3))
    assert torch.equal(x, before)
    for bad in (lambda: apply_rope(torch.randn(3, 5), torch.arange(3)),
                lambda: apply_rope(x, torch.arange(4)),
                lambda: apply_rope(x, torch.arange(3.0))):
        with pytest.raises(ValueError):
            bad()


def paper_slopes(n):
    """The slope rule of Press et al.'s code, written out: start = 2^(-8/n), ratio = start."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 8, 12, 16, 20])
def test_alibi_slopes_follow_the_paper(n):
    torch.testing.assert_close(alibi_slopes(n), torch.tensor(paper_slopes(n), dtype=torch.float32))


def test_alibi_slopes_for_eight_heads_are_halves():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -h for h in range(1, 9)]))


def test_alibi_bias_by_loops():
    H, T_q, T_k = 3, 2, 5
    got = alibi_bias(H, T_q, T_k)
    m = paper_slopes(H)
    for h in range(H):
        for i in range(T_q):
            for j in range(T_k):
                assert float(got[h, i, j]) == pytest.approx(-m[h] * abs(T_k - T_q + i - j))
    assert got.dtype == torch.float32 and got.shape == (H, T_q, T_k)
    with pytest.raises(ValueError):
        alibi_bias(2, 5, 3)
    with pytest.raises(ValueError):
        alibi_bias(0, 3, 3)


@pytest.mark.parametrize("T_q, T_k, w", [(5, 5, 1), (5, 5, 2), (6, 6, 10), (3, 8, 3), (1, 9, 4), (0, 4, 2)])
def test_sliding_window_mask_by_loops(T_q, T_k, w):
    expected = torch.zeros(T_q, T_k, dtype=torch.bool)
    for i in range(T_q):
        p = T_k - T_q + i
        for j in range(T_k):
            expected[i, j] = p - w < j <= p
    assert torch.equal(sliding_window_mask(T_q, T_k, w), expected)


def test_sliding_window_mask_rejects_bad_arguments():
    for args in ((3, 3, 0), (4, 3, 2), (-1, 3, 1)):
        with pytest.raises(ValueError):
            sliding_window_mask(*args)


def test_sliding_window_attention_equals_masked_attention():
    q, k, v = torch.randn(2, 11, 4), torch.randn(2, 11, 4), torch.randn(2, 11, 3)
    for w in (1, 3, 11, 20):
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=sliding_window_mask(11, 11, w))
        torch.testing.assert_close(sliding_window_attention(q, k, v, w), expected, atol=1e-6, rtol=1e-5)


def test_sliding_window_attention_holds_the_band_only():
    """The blocked band's largest tensor is its 2Tw scores (the chapter's Fig. 11.4), never (T, T) or (T, w, d)."""
    q, k, v = torch.randn(1, 1024, 16), torch.randn(1, 1024, 16), torch.randn(1, 1024, 16)
    meter = MemoryMeter([q, k, v])
    with meter:
        sliding_window_attention(q, k, v, 32)
    assert meter.largest <= 2 * 1024 * 32, meter.largest


def quadratic_linear_attention(q, k, v, causal, eps=1e-6):
    """The explicit form phi(Q) phi(K)^T V / (phi(Q) phi(K)^T 1 + eps), with the (T_q, T_k) matrix."""
    a = (F.elu(q.double()) + 1) @ (F.elu(k.double()) + 1).transpose(-2, -1)
    if causal:
        a = a * torch.ones(a.shape[-2:], dtype=torch.float64).tril()
    return a @ v.double() / (a.sum(-1, keepdim=True) + eps)


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention_is_the_quadratic_form(causal):
    q, k, v = torch.randn(2, 3, 9, 4), torch.randn(2, 3, 9, 4), torch.randn(2, 3, 9, 5)
    torch.testing.assert_close(linear_attention(q, k, v, causal=causal).double(),
                               quadratic_linear_attention(q, k, v, causal), atol=1e-5, rtol=1e-5)


def test_linear_attention_cross_eps_and_errors():
    f64 = torch.float64
    q, k, v = torch.randn(4, 3, dtype=f64), torch.randn(7, 3, dtype=f64), torch.randn(7, 2, dtype=f64)
    torch.testing.assert_close(linear_attention(q, k, v, eps=0.5), quadratic_linear_attention(q, k, v, False, 0.5))
    with pytest.raises(ValueError):
        linear_attention(q, k, v, causal=True)
    assert linear_attention(q.half(), k.half(), v.half()).dtype == torch.float16


def test_linear_attention_causal_rows_are_a_recurrence():
    """Row i from the running state S_i = S_{i-1} + phi(k_i) v_i^T, z_i = z_{i-1} + phi(k_i), as an RNN."""
    f64 = torch.float64
    q, k, v = torch.randn(6, 3, dtype=f64), torch.randn(6, 3, dtype=f64), torch.randn(6, 2, dtype=f64)
    S, z, rows = torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3, dtype=torch.float64), []
    for i in range(6):
        fk, fq = F.elu(k[i]) + 1, F.elu(q[i]) + 1
        S, z = S + torch.outer(fk, v[i]), z + fk
        rows.append(fq @ S / (fq @ z + 1e-6))
    torch.testing.assert_close(linear_attention(q, k, v, causal=True), torch.stack(rows))


def full_rope_attention(q, k, v):
    T = q.shape[-2]
    pos = torch.arange(T)
    return F.scaled_dot_product_attention(apply_rope(q, pos), apply_rope(k, pos), v, is_causal=True)


def test_cached_decoding_equals_full_sequence_attention():
    B, T, d = 2, 9, 8
    f64 = torch.float64
    q, k, v = torch.randn(B, T, d, dtype=f64), torch.randn(B, T, d, dtype=f64), torch.randn(B, T, 3, dtype=f64)
    full = full_rope_attention(q, k, v)
    k_cache, v_cache = torch.zeros(B, 0, d, dtype=torch.float64), torch.zeros(B, 0, 3, dtype=torch.float64)
    outs = []
    for a, b in ((0, 4), (4, 5), (5, 6), (6, 9)):  # a prompt of 4, two single tokens, then a chunk of 3
        out, k_cache, v_cache = rope_cached_attention(q[:, a:b], k[:, a:b], v[:, a:b], k_cache, v_cache)
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, dim=1), full)
    torch.testing.assert_close(k_cache, apply_rope(k, torch.arange(T)))
    torch.testing.assert_close(v_cache, v)


def test_the_bug_hunts_reference_stands_on_its_own(monkeypatch):
    """Its statement says the cell is graded without the other exercises: the reference calls none of them."""
    import solutions.long_context as lc

    def absent(*args, **kwargs):
        raise AssertionError("rope_cached_attention called another exercise")

    for name in ("apply_rope", "alibi_bias", "sliding_window_mask", "linear_attention"):
        monkeypatch.setattr(lc, name, absent)
    q, k, v = torch.randn(2, 3, 8), torch.randn(2, 3, 8), torch.randn(2, 3, 4)
    k_cache, v_cache = apply_rope(torch.randn(2, 5, 8), torch.arange(5)), torch.randn(2, 5, 4)
    out, k_all, v_all = lc.rope_cached_attention(q, k, v, k_cache, v_cache)
    assert out.shape == (2, 3, 4) and k_all.shape == (2, 8, 8) and v_all.shape == (2, 8, 4)
    torch.testing.assert_close(k_all[:, 5:], apply_rope(k, torch.arange(5, 8)))
