"""Chapter 8 (the O(T²) cost): the reference against independent oracles, and the hidden checks.

Oracles: ``torch.utils.flop_counter.FlopCounterMode`` (counts the FLOPs of the matrix products PyTorch
actually runs), brute-force counts of mask entries, ``Tensor.nbytes`` of real tensors, ``np.polyfit``, and
``torch.nn.functional.scaled_dot_product_attention`` (bool ``attn_mask``, True = attend) in float64. Then
the case generators of ``solutions/cases/complexity.py`` and the notebook's hidden checks, including the
memory bound that must fail any implementation that builds the whole score matrix.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import solutions.cases.complexity as cases_mod
import solutions.complexity as ref
from grader import cells
from grader.checks import CheckFailed, parse_checks, prepare, run_local
from solutions.qkv import scaled_dot_product_attention as ch02_attention

from .casecheck import assert_generator_is_deterministic_and_labelled

NOTEBOOK = Path(__file__).resolve().parents[1] / "book" / "ch08_complexity" / "complexity.ipynb"

def hidden_blocks() -> dict[str, str]:
    return cells.hidden_blocks(nbformat.read(NOTEBOOK, as_version=4))


class LargestTensor(TorchDispatchMode):
    """The largest tensor (in elements) that a non-view operator creates inside the block."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            for t in torch.utils._pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.numel = max(self.numel, t.numel())
        return out


@pytest.fixture(scope="module", autouse=True)
def dispatch_warmed_up():
    """The first operator run under a TorchDispatchMode imports torch._dynamo (~70 MB of Python objects);
    do it once here so that the memory-bounded checks below measure the code, not that import."""
    with LargestTensor():
        torch.ones(1) + 1


def naive_attention(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


# ---------------------------------------------------------------------------------------------------
# attention_flops


@pytest.mark.parametrize("T, d_k, d_v, batch, heads", [(7, 4, 4, 1, 1), (16, 8, 3, 2, 3), (5, 2, 9, 3, 1)])
def test_attention_flops_equal_what_flop_counter_mode_counts_for_naive_attention(T, d_k, d_v, batch, heads):
    q, k, v = torch.randn(batch, heads, T, d_k), torch.randn(batch, heads, T, d_k), torch.randn(batch, heads, T, d_v)
    with FlopCounterMode(display=False) as counter:
        naive_attention(q, k, v)  # FlopCounterMode counts matrix products only: 2 FLOPs per multiply-add
    assert ref.attention_flops(T, d_k, d_v, batch=batch, heads=heads) == counter.get_total_flops()


@pytest.mark.parametrize("T", [0, 1, 2, 9, 64])
def test_causal_attention_flops_count_the_pairs_a_causal_mask_keeps(T):
    kept = int(torch.ones(T, T, dtype=torch.bool).tril().sum())  # brute force: diagonal included
    assert ref.attention_flops(T, 8, 3, batch=2, heads=5, causal=True) == 2 * 2 * 5 * kept * (8 + 3)
    assert ref.attention_flops(T, 8, causal=False) == 2 * T * T * 16


def test_attention_flops_are_exact_ints_beyond_float_precision():
    n = ref.attention_flops(1_000_003, 101, 98, batch=9, heads=25, causal=True)
    assert type(n) is int
    assert n == 2 * 9 * 25 * (1_000_003 * 1_000_004 // 2) * 199
    assert int(float(n)) != n  # a float could not have held it


def test_attention_flops_do_not_depend_on_the_number_of_heads_at_fixed_model_width():
    d_model, T = 768, 1000
    counts = {ref.attention_flops(T, d_model // h, heads=h) for h in (1, 2, 4, 12, 768)}
    assert counts == {4 * T * T * d_model}


def test_attention_flops_reject_bad_sizes():
    with pytest.raises(ValueError, match="T must be >= 0"):
        ref.attention_flops(-1, 4)
    with pytest.raises(ValueError, match="d_k must be >= 1"):
        ref.attention_flops(4, 0)
    with pytest.raises(ValueError, match="heads must be >= 1"):
        ref.attention_flops(4, 4, heads=0)
    with pytest.raises(TypeError, match="T must be an int"):
        ref.attention_flops(4.0, 4)


# ---------------------------------------------------------------------------------------------------
# attention_cost: FLOPs counted by FlopCounterMode, HBM bytes summed from the tensors the kernels touch


class KernelTraffic(TorchDispatchMode):
    """Bytes of every tensor a non-view operator reads (its tensor arguments) or writes (its outputs):
    the HBM traffic of running each operator as one kernel."""

    def __init__(self):
        super().__init__()
        self.bytes = 0
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = [t for t in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outputs = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        aliases = {t.untyped_storage().data_ptr() for t in inputs}
        allocation = "empty" in str(func)  # memory handed out, nothing read or written
        if not func.is_view and not allocation and not any(t.untyped_storage().data_ptr() in aliases
                                                             for t in outputs):
            self.ops.append(str(func))  # a kernel: it reads its inputs and writes its outputs
            self.bytes += sum(t.numel() * t.element_size() for t in inputs + outputs)
        return out


def standard_attention_counted(T, d, n, dtype, backward):
    """The standard kernel's three operators (Q pre-scaled, outside the count), forward or backward."""
    q, k, v = (torch.randn(n, T, d, dtype=torch.float64).to(dtype).requires_grad_() for _ in range(3))
    grad = torch.randn(n, T, d, dtype=torch.float64).to(dtype)
    flops, traffic = FlopCounterMode(display=False), KernelTraffic()
    if not backward:
        with flops, traffic:
            o = torch.softmax(q @ k.mT, dim=-1) @ v
        return flops.get_total_flops(), traffic.bytes, traffic.ops
    o = torch.softmax(q @ k.mT, dim=-1) @ v
    with flops, traffic:
        o.backward(grad)
    return flops.get_total_flops(), traffic.bytes, traffic.ops


@pytest.mark.parametrize("T, d, n", [(7, 3, 1), (33, 5, 2)])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_standard_cost_equals_what_its_operators_compute_and_touch(T, d, n, backward, dtype):
    flops, nbytes, ops = standard_attention_counted(T, d, n, dtype, backward)
    cost = ref.attention_cost(T, d, heads=n, dtype=dtype, kind="standard", backward=backward)
    assert cost == {"flops": flops, "hbm_bytes": nbytes}, ops
    assert ref.attention_cost(T, d, heads=n, dtype=dtype, causal=True, backward=backward) == cost


class HBM:
    """Tensors 'in HBM': every load or store of a slice adds its bytes (rows * width * itemsize)."""

    def __init__(self):
        self.bytes = 0

    def load(self, t, a, b):
        self.bytes += t[a:b].numel() * t.element_size()
        return t[a:b].clone()

    def store(self, t, a, b, value):
        self.bytes += t[a:b].numel() * t.element_size()
        t[a:b] = value


def flash_forward_loop(q, k, v, bq, bk, causal, hbm):
    """FlashAttention's forward for one head, written from Dao et al.'s algorithm: outer loop over query
    blocks, inner loop over the key blocks a causal mask does not skip, online softmax on chip."""
    T, d = q.shape
    o, lse = torch.empty_like(q), torch.empty(T, dtype=torch.float32)
    for a in range(0, T, bq):
        b = min(a + bq, T)
        qi = hbm.load(q, a, b)
        m = torch.full((b - a, 1), -math.inf, dtype=q.dtype)
        l, acc = torch.zeros(b - a, 1, dtype=q.dtype), torch.zeros(b - a, d, dtype=q.dtype)
        for c in range(0, T, bk):
            e = min(c + bk, T)
            if causal and c > b - 1:
                break
            kj, vj = hbm.load(k, c, e), hbm.load(v, c, e)
            s = qi @ kj.T / math.sqrt(d)
            if causal:
                s = s.masked_fill(torch.arange(c, e)[None, :] > torch.arange(a, b)[:, None], -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p = torch.exp(s - m_new)
            scale = torch.exp(m - m_new)
            l, acc, m = l * scale + p.sum(-1, keepdim=True), acc * scale + p @ vj, m_new
        hbm.store(o, a, b, acc / l)
        hbm.store(lse, a, b, (m + l.log()).squeeze(-1).float())
    return o, lse


def flash_backward_loop(q, k, v, o, do, lse, bq, bk, causal, hbm):
    """FlashAttention-2's backward for one head: D = rowsum(dO * O), then an outer loop over key blocks,
    the scores recomputed from Q, K and the logsumexp, dQ accumulated in HBM."""
    T, d = q.shape
    dq, dk, dv = torch.zeros_like(q), torch.empty_like(k), torch.empty_like(v)
    D = torch.empty(T, dtype=torch.float32)
    oo, dd = hbm.load(o, 0, T), hbm.load(do, 0, T)
    hbm.store(D, 0, T, (oo * dd).sum(-1).float())
    for c in range(0, T, bk):
        e = min(c + bk, T)
        kj, vj = hbm.load(k, c, e), hbm.load(v, c, e)
        dkj, dvj = torch.zeros_like(kj), torch.zeros_like(vj)
        for a in range(0, T, bq):
            b = min(a + bq, T)
            if causal and c > b - 1:
                continue
            qi, doi = hbm.load(q, a, b), hbm.load(do, a, b)
            li, Di = hbm.load(lse, a, b).to(q.dtype)[:, None], hbm.load(D, a, b).to(q.dtype)[:, None]
            s = qi @ kj.T / math.sqrt(d)
            if causal:
                s = s.masked_fill(torch.arange(c, e)[None, :] > torch.arange(a, b)[:, None], -math.inf)
            p = torch.exp(s - li)
            dvj += p.T @ doi
            dp = doi @ vj.T
            ds = p * (dp - Di) / math.sqrt(d)
            hbm.store(dq, a, b, hbm.load(dq, a, b) + ds @ kj)
            dkj += ds.T @ qi
        hbm.store(dk, c, e, dkj)
        hbm.store(dv, c, e, dvj)
    return dq, dk, dv


FLASH_SHAPES = [(10, 4, 3, 4), (16, 4, 4, 4), (13, 3, 5, 2), (9, 2, 1, 1), (12, 3, 12, 12), (11, 2, 20, 3),
                (17, 3, 4, 8)]


@pytest.mark.parametrize("T, d, bq, bk", FLASH_SHAPES)
@pytest.mark.parametrize("causal", [False, True])
def test_flash_cost_equals_what_the_tiled_loops_compute_and_move(T, d, bq, bk, causal):
    g = torch.Generator().manual_seed(T * 100 + d)
    q, k, v, do = (torch.randn(T, d, generator=g, dtype=torch.float64) for _ in range(4))
    fwd, hbm = FlopCounterMode(display=False), HBM()
    with fwd:
        o, lse = flash_forward_loop(q, k, v, bq, bk, causal, hbm)
    mask = torch.ones(T, T, dtype=torch.bool).tril() if causal else None
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    expected = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask)
    assert torch.allclose(o, expected, atol=1e-10)  # the loop is attention
    assert ref.attention_cost(T, d, dtype=torch.float64, kind="flash", block_q=bq, block_k=bk,
                              causal=causal) == {"flops": fwd.get_total_flops(), "hbm_bytes": hbm.bytes}
    bwd, hbm = FlopCounterMode(display=False), HBM()
    with bwd:
        grads = flash_backward_loop(q, k, v, o, do, lse, bq, bk, causal, hbm)
    expected.backward(do)
    for mine, auto in zip(grads, (qg.grad, kg.grad, vg.grad)):
        assert torch.allclose(mine, auto, atol=1e-5)  # and its backward is attention's (float32 L and D)
    assert ref.attention_cost(T, d, dtype=torch.float64, kind="flash", block_q=bq, block_k=bk, causal=causal,
                              backward=True) == {"flops": bwd.get_total_flops(), "hbm_bytes": hbm.bytes}


def test_flash_cost_scales_with_heads_batch_and_element_size():
    one = ref.attention_cost(100, 16, kind="flash", block_q=32, block_k=16, causal=True, dtype=torch.float16)
    many = ref.attention_cost(100, 16, heads=3, batch=5, kind="flash", block_q=32, block_k=16, causal=True,
                              dtype=torch.float16)
    assert many == {"flops": 15 * one["flops"], "hbm_bytes": 15 * one["hbm_bytes"]}


def test_causal_tiles_skip_about_half_the_work_only_when_tiles_are_small():
    full = ref.attention_cost(1024, 64, kind="flash", block_q=64, block_k=64)["flops"]
    assert ref.attention_cost(1024, 64, kind="flash", block_q=1024, block_k=1024, causal=True)["flops"] == full
    kept = 1024 * 1025 // 2
    assert ref.attention_cost(1024, 64, kind="flash", block_q=1, block_k=1, causal=True)["flops"] == 4 * kept * 64
    tiled = ref.attention_cost(1024, 64, kind="flash", block_q=64, block_k=64, causal=True)["flops"]
    assert 4 * kept * 64 < tiled < 0.6 * full


def test_flash_moves_fewer_bytes_than_the_standard_kernel_for_the_same_matmul_flops():
    for T, bq in ((64, 16), (100, 7), (4096, 128)):
        std = ref.attention_cost(T, 8, kind="standard")
        fl = ref.attention_cost(T, 8, kind="flash", block_q=bq, block_k=bq)
        assert fl["flops"] == std["flops"] and fl["hbm_bytes"] < std["hbm_bytes"]


def test_attention_cost_is_exact_beyond_int64_and_for_numpy_sizes():
    cost = ref.attention_cost(2**20, 128, heads=96, batch=256, kind="standard")
    assert cost["flops"] == 4 * 2**40 * 128 * 96 * 256 > 2**63 and type(cost["flops"]) is int
    wide = ref.attention_cost(np.int64(2**20), np.int64(128), heads=np.int64(96), batch=np.int64(256))
    assert wide == cost and all(type(x) is int for x in wide.values())


@pytest.mark.parametrize("dtype", sorted({getattr(torch, n) for n in dir(torch)
                                          if isinstance(getattr(torch, n), torch.dtype)}, key=str))
def test_attention_cost_takes_the_element_size_of_any_dtype(dtype):
    c1 = ref.attention_cost(8, 4, dtype=torch.uint8)["hbm_bytes"]
    assert ref.attention_cost(8, 4, dtype=dtype)["hbm_bytes"] == c1 * dtype.itemsize


@pytest.mark.parametrize("kwargs, error", [
    ({"T": -1}, ValueError), ({"d": 0}, ValueError), ({"heads": 0}, ValueError), ({"batch": 0}, ValueError),
    ({"block_q": 0}, ValueError), ({"block_k": 0}, ValueError), ({"kind": "linear"}, ValueError),
    ({"T": 4.0}, TypeError), ({"d": True}, TypeError), ({"dtype": "float32"}, TypeError),
    ({"causal": 1}, TypeError), ({"backward": None}, TypeError),
])
def test_attention_cost_rejects_bad_arguments(kwargs, error):
    args = {"T": 8, "d": 4} | kwargs
    with pytest.raises(error):
        ref.attention_cost(**args)


def test_roofline_time_is_the_larger_of_the_two_times():
    assert ref.roofline_time(10**12, 10**9, 1e12, 1e12) == 1.0
    assert ref.roofline_time(10**9, 2 * 10**12, 1e12, 1e12) == 2.0
    assert ref.roofline_time(0, 0, 1.0, 1.0) == 0.0
    assert ref.roofline_time(2**70, 1, 1e15, 1e12) == pytest.approx(2**70 / 1e15)
    for bad in ((-1, 0, 1.0, 1.0), (0, -1, 1.0, 1.0), (1, 1, 0.0, 1.0), (1, 1, 1.0, -2.0),
                (1, 1, math.inf, 1.0), (math.nan, 1, 1.0, 1.0)):
        with pytest.raises(ValueError):
            ref.roofline_time(*bad)


def test_roofline_time_computes_in_float64_and_rejects_what_is_not_a_number():
    f32 = np.float32
    assert ref.roofline_time(f32(3), f32(7), f32(11), f32(13)) == 7.0 / 13.0  # float32 would round it
    assert type(ref.roofline_time(f32(3), f32(7), f32(11), f32(13))) is float
    assert ref.roofline_time(f32(3e38), f32(1), f32(1e-3), f32(1e9)) == float(f32(3e38)) / float(f32(1e-3))
    assert ref.roofline_time(1e300, 1.0, 1e-10, 1e9) == math.inf  # a time past the float range
    with pytest.raises(OverflowError):  # an int count past the float range, as float() says
        ref.roofline_time(10**400, 1, 1.0, 1.0)
    for bad in ((True, 1, 1.0, 1.0), (1, 1, 1.0, np.True_), ("1", 1, 1.0, 1.0), (1, None, 1.0, 1.0),
                (torch.tensor(1.0), 1, 1.0, 1.0)):
        with pytest.raises(TypeError):
            ref.roofline_time(*bad)


def test_chunked_attention_sizes_are_integers_as_attention_costs_are():
    q = torch.randn(2, 5, 4)
    torch.testing.assert_close(ref.chunked_attention(q, q, q, np.int64(2)), ref.chunked_attention(q, q, q, 2))
    for bad in (2.0, True, np.True_, "2"):
        with pytest.raises(TypeError):
            ref.chunked_attention(q, q, q, bad)
        with pytest.raises(TypeError):
            ref.attention_cost(16, 8, block_q=bad)
    for small in (0, -3):
        with pytest.raises(ValueError):
            ref.chunked_attention(q, q, q, small)


# ---------------------------------------------------------------------------------------------------
# attention_matrix_bytes and the 40 GB claim


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8,
                                   torch.bool, torch.int64])
def test_attention_matrix_bytes_equal_the_nbytes_of_a_real_tensor(dtype):
    real = torch.empty(2, 3, 11, 11, dtype=dtype)
    assert ref.attention_matrix_bytes(11, batch=2, heads=3, dtype=dtype) == real.nbytes


def test_the_popular_40_gb_claim_is_one_fp32_matrix_of_one_head():
    n = ref.attention_matrix_bytes(100_000)
    assert n == 4 * 10**10 and type(n) is int
    assert round(n / 2**30, 1) == 37.3  # GiB, as nvidia-smi and PyTorch report it
    assert ref.attention_matrix_bytes(100_000, dtype=torch.bfloat16) == n // 2


def test_attention_matrix_bytes_reject_non_dtypes():
    with pytest.raises(TypeError, match="torch.dtype"):
        ref.attention_matrix_bytes(4, dtype="float32")


# ---------------------------------------------------------------------------------------------------
# rnn_flops


@pytest.mark.parametrize("T, d, batch", [(5, 3, 1), (8, 16, 4)])
def test_rnn_flops_equal_what_flop_counter_mode_counts_for_an_rnn_loop(T, d, batch):
    x, W_xh, W_hh, b = torch.randn(batch, T, d), torch.randn(d, d), torch.randn(d, d), torch.randn(d)
    h = torch.zeros(batch, d)
    with FlopCounterMode(display=False) as counter:
        for t in range(T):
            h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b)
    assert ref.rnn_flops(T, d, batch) == counter.get_total_flops()


def test_attention_and_rnn_cost_the_same_at_t_equal_d_and_attention_more_beyond():
    d = 512
    assert ref.attention_flops(d, d) == ref.rnn_flops(d, d)
    assert ref.attention_flops(d // 2, d) < ref.rnn_flops(d // 2, d)
    assert ref.attention_flops(4 * d, d) == 4 * ref.rnn_flops(4 * d, d)


# ---------------------------------------------------------------------------------------------------
# loglog_slope


def test_loglog_slope_matches_polyfit_on_the_logarithms_and_ignores_the_base():
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 1000, 20)
    y = 2.5 * x**1.7 * np.exp(rng.normal(0, 0.3, 20))
    p = ref.loglog_slope(x, y)
    assert type(p) is float
    assert p == pytest.approx(np.polyfit(np.log(x), np.log(y), 1)[0], rel=1e-12)
    assert p == pytest.approx(np.polyfit(np.log10(x), np.log10(y), 1)[0], rel=1e-12)
    assert p != pytest.approx(1 / np.polyfit(np.log(y), np.log(x), 1)[0], rel=1e-3)  # the axes matter


@pytest.mark.parametrize("convert", [list, np.array, torch.tensor, lambda a: torch.tensor(a, dtype=torch.float64)])
def test_loglog_slope_recovers_exact_power_laws_from_every_input_type(convert):
    x = [2.0, 3.0, 10.0, 50.0]
    for p in (-1.0, 0.0, 0.5, 2.0, 3.0):
        assert ref.loglog_slope(convert(x), convert([7.0 * xi**p for xi in x])) == pytest.approx(p, abs=1e-5)


@pytest.mark.parametrize("xs, ys, message", [
    ([1.0, 0.0], [1.0, 2.0], "positive"), ([1.0, 2.0], [1.0, -2.0], "positive"), ([3.0], [9.0], "at least 2"),
    ([], [], "at least 2"), ([1.0, 2.0, 3.0], [1.0, 2.0], "equally long"), ([2.0, 2.0], [1.0, 3.0], "equal"),
    ([1.0, float("inf")], [1.0, 2.0], "finite"),
])
def test_loglog_slope_rejects_what_has_no_slope(xs, ys, message):
    with pytest.raises(ValueError, match=message):
        ref.loglog_slope(xs, ys)


# ---------------------------------------------------------------------------------------------------
# chunked_attention


def sdpa64(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask)


@pytest.mark.parametrize("batch, T_q, T_k, d_k, d_v, chunk", [
    ((), 5, 5, 4, 4, 2), ((3,), 7, 7, 4, 6, 3), ((2, 3), 10, 6, 4, 3, 4), ((2,), 3, 11, 5, 2, 1),
    ((2,), 5, 8, 4, 4, 64), ((2, 2), 6, 6, 3, 3, 6), ((1,), 33, 40, 8, 8, 8),
])
def test_chunked_attention_equals_torch_sdpa(batch, T_q, T_k, d_k, d_v, chunk):
    gen = torch.Generator().manual_seed(T_q * 100 + T_k)
    q, k = torch.randn(*batch, T_q, d_k, generator=gen), torch.randn(*batch, T_k, d_k, generator=gen)
    v = torch.randn(*batch, T_k, d_v, generator=gen)
    out = ref.chunked_attention(q, k, v, chunk)
    assert out.shape == (*batch, T_q, d_v) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), sdpa64(q, k, v), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("mask_shape", [(9, 9), (2, 1, 9, 9), (2, 1, 1, 9), (1, 3, 9, 9), (2, 3, 1, 9), (9,)])
def test_chunked_attention_applies_every_broadcastable_mask_shape_per_chunk(mask_shape):
    gen = torch.Generator().manual_seed(len(mask_shape))
    q, k, v = (torch.randn(2, 3, 9, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(*mask_shape, generator=gen) < 0.6
    mask[..., 0] = True  # no fully masked row here
    full = mask if mask.dim() >= 2 else mask.expand(9, 9)  # F.scaled_dot_product_attention wants 2-D or more
    torch.testing.assert_close(ref.chunked_attention(q, k, v, 4, mask), sdpa64(q, k, v, full))


def test_chunked_attention_with_a_causal_mask_equals_sdpa_is_causal():
    q, k, v = (torch.randn(2, 17, 8, dtype=torch.float64) for _ in range(3))
    causal = torch.ones(17, 17, dtype=torch.bool).tril()
    torch.testing.assert_close(ref.chunked_attention(q, k, v, 5, causal),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_fully_masked_query_rows_give_zeros_and_the_others_are_unaffected():
    q, k, v = (torch.randn(2, 6, 4, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(2, 6, 6, dtype=torch.bool).tril()
    mask[0, 2] = False
    mask[1, 5] = False
    out = ref.chunked_attention(q, k, v, 4, mask)
    assert not out.isnan().any()
    assert torch.equal(out[0, 2], torch.zeros(4)) and torch.equal(out[1, 5], torch.zeros(4))
    keep = mask.any(-1)
    expected, _ = ch02_attention(q, k, v, mask | ~keep[..., None])  # chapter 2 gives NaN on empty rows
    torch.testing.assert_close(out[keep], expected[keep])


def test_chunked_attention_is_stable_at_huge_logits():
    q, k, v = torch.randn(2, 5, 4) * 100, torch.randn(2, 7, 4) * 100, torch.randn(2, 7, 3)
    out = ref.chunked_attention(q, k, v, 2)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), sdpa64(q, k, v), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("chunk", [1, 16, 100])
def test_chunked_attention_never_creates_more_than_one_chunk_of_scores(chunk):
    B, T, d = 3, 512, 8
    q, k, v = (torch.randn(B, T, d) for _ in range(3))
    mask = (torch.arange(T) < torch.tensor([[512], [300], [7]]))[:, None, :]  # (B, 1, T) key padding
    with LargestTensor() as meter:
        ref.chunked_attention(q, k, v, chunk, mask)
    assert meter.numel <= max(B * chunk * T, B * T * d)
    with LargestTensor() as meter:
        naive_attention(q, k, v)
    assert meter.numel == B * T * T  # the meter does see a whole matrix


def test_chunked_attention_gradients_equal_those_of_naive_attention():
    q, k, v = (torch.randn(2, 9, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    grad = torch.randn(2, 9, 4, dtype=torch.float64)
    chunked = torch.autograd.grad(ref.chunked_attention(q, k, v, 4), (q, k, v), grad)
    naive = torch.autograd.grad(naive_attention(q, k, v), (q, k, v), grad)
    for a, b in zip(chunked, naive):
        torch.testing.assert_close(a, b)


def test_chunked_attention_leaves_inputs_unchanged_and_handles_empty_queries():
    q, k, v, mask = torch.randn(2, 5, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 3), torch.rand(5, 6) < 0.5
    before = [t.clone() for t in (q, k, v, mask)]
    ref.chunked_attention(q, k, v, 2, mask)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v, mask), before))
    assert ref.chunked_attention(q[:, :0], k, v, 2).shape == (2, 0, 3)


def test_chunked_attention_rejects_bad_input_with_clear_errors():
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    with pytest.raises(ValueError, match="chunk_size"):
        ref.chunked_attention(q, k, v, 0)
    with pytest.raises(TypeError, match="chunk_size"):  # not an integer: TypeError, as attention_cost's sizes
        ref.chunked_attention(q, k, v, 2.0)
    with pytest.raises(TypeError, match="bool tensor"):
        ref.chunked_attention(q, k, v, 2, torch.ones(3, 5))
    with pytest.raises(ValueError, match="share d_k"):
        ref.chunked_attention(q, torch.randn(5, 3), v, 2)
    with pytest.raises(ValueError, match="one row per key"):
        ref.chunked_attention(q, k, torch.randn(4, 2), 2)
    with pytest.raises(ValueError, match="does not broadcast"):
        ref.chunked_attention(q, k, v, 2, torch.ones(5, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="does not broadcast"):
        ref.chunked_attention(q, k, v, 2, torch.ones(2, 3, 5, dtype=torch.bool))


# ---------------------------------------------------------------------------------------------------
# case generators


GENERATORS = ["attention_cost_cases", "roofline_time_cases", "loglog_slope_cases",
              "chunked_attention_cases", "chunked_attention_memory_cases"]


@pytest.mark.parametrize("name", GENERATORS)
def test_case_generators_are_deterministic_labelled_and_non_empty(name):
    assert_generator_is_deterministic_and_labelled(getattr(cases_mod, name), 3)


def test_counting_cases_need_exact_integers_every_element_size_and_fit_the_wire():
    from grader.checks import MAX_INT_BITS
    from solutions.cases.families import INT64_MAX

    cases = [c for c in cases_mod.attention_cost_cases(0) if c.raises is None]
    values = [v for c in cases for v in ref.attention_cost(*c.args, **c.kwargs).values()]
    assert all(v.bit_length() <= MAX_INT_BITS for v in values)
    assert any(v > INT64_MAX for v in values)  # int64 arithmetic wraps
    assert any(int(float(v)) != v for v in values)  # float arithmetic rounds
    sizes = {c.kwargs.get("dtype", torch.bfloat16).itemsize for c in cases}
    assert sizes == {1, 2, 4, 8, 16}
    assert any(type(c.args[0]).__module__ == "numpy" for c in cases)
    kinds = {(c.kwargs.get("kind", "standard"), c.kwargs.get("causal", False), c.kwargs.get("backward", False))
             for c in cases}
    assert len(kinds) == 8
    bad = [c for c in cases_mod.attention_cost_cases(0) if c.raises]
    assert {c.raises for c in bad} == {"ValueError", "TypeError"}


def test_loglog_noisy_cases_separate_least_squares_from_the_shortcuts():
    noisy = [c for c in cases_mod.loglog_slope_cases(0) if "noisy" in c.label]
    assert len(noisy) >= 2
    for c in noisy:
        x, y = (np.asarray(a, dtype=float) for a in c.args)
        p = ref.loglog_slope(x, y)
        lx, ly = np.log(x), np.log(y)
        order = np.argsort(x)
        shortcuts = {"end points": (ly[-1] - ly[0]) / (lx[-1] - lx[0]),
                     "neighbours": float(np.mean(np.diff(ly[order]) / np.diff(lx[order]))),
                     "swapped axes": 1 / np.polyfit(ly, lx, 1)[0],
                     "linear axes": np.polyfit(x, y, 1)[0]}
        for how, wrong in shortcuts.items():
            assert abs(wrong - p) > 1e-3, (c.label, how)
    assert sum(c.raises == "ValueError" for c in cases_mod.loglog_slope_cases(0)) >= 4


def test_chunked_value_cases_cover_chunks_masks_and_dtypes():
    cases = cases_mod.chunked_attention_cases(0)
    T_q = [c.args[0].shape[-2] for c in cases]
    chunk = [c.args[3] for c in cases]
    assert any(t % ch for t, ch in zip(T_q, chunk) if ch < t)  # a short last chunk
    assert any(ch > t for t, ch in zip(T_q, chunk)) and any(ch == t for t, ch in zip(T_q, chunk)) and 1 in chunk
    assert any(c.args[0].shape[-2] != c.args[1].shape[-2] for c in cases)
    masks = [c.kwargs["mask"] for c in cases if "mask" in c.kwargs]
    assert {m.dim() for m in masks} >= {2, 3, 4}
    assert any(m.shape[-2] == 1 for m in masks)  # key padding: one row shared by all queries
    assert any(not m.any(-1).all() for m in masks)  # a fully masked query row
    assert any(c.args[0].dtype == torch.float64 for c in cases)


def test_memory_cases_bound_memory_so_that_only_chunks_fit():
    for c in cases_mod.chunked_attention_memory_cases(0):
        q, k, v, chunk = c.args
        n_batch = math.prod(q.shape[:-2])
        T_q, T_k = q.shape[-2], k.shape[-2]
        assert c.max_numel >= max(n_batch * chunk * T_k, q.numel(), k.numel(), v.numel()), c.label
        mask = c.kwargs.get("mask")
        if mask is None or mask.numel() < T_q * T_k:  # a (T_q, T_k) mask is itself one head's matrix
            assert T_q * T_k > 2 * c.max_numel, c.label  # a single head's matrix does not fit
        assert n_batch * T_q * T_k > 4 * c.max_numel, c.label  # all heads' matrix does not
        assert 8 * T_q * T_k * 4 > 8 * c.max_numel + 256 * 1024, c.label  # not even as numpy float32
        with LargestTensor() as meter:
            ref.chunked_attention(q, k, v, chunk, **c.kwargs)
        assert meter.numel <= c.max_numel, c.label


# ---------------------------------------------------------------------------------------------------
# the notebook's hidden checks


def test_chunked_attention_is_checked_for_values_and_for_memory_with_sdpa_banned():
    checks = parse_checks(hidden_blocks()["test_chunked_attention"])
    assert {c.cases.rpartition(":")[2] for c in checks} == {"chunked_attention_cases", "chunked_attention_memory_cases",
                                                                "chunked_attention_dtype_cases"}
    for check in checks:
        assert {"torch.nn.functional.scaled_dot_product_attention", "aten._scaled_dot_product*"} <= set(check.banned)
    memory = next(c for c in checks if c.cases.endswith("memory_cases"))
    assert all(case.max_numel for case in prepare(memory))


def _memory_check():
    return next(c for c in parse_checks(hidden_blocks()["test_chunked_attention"]) if c.cases.endswith("memory_cases"))


def _naive_in_torch(q, k, v, chunk_size, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _naive_in_numpy(q, k, v, chunk_size, mask=None):
    s = q.numpy() @ np.swapaxes(k.numpy(), -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask.numpy(), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return torch.from_numpy(((e / e.sum(-1, keepdims=True)) @ v.numpy()).astype(np.float32))


def _naive_one_head_at_a_time(q, k, v, chunk_size, mask=None):
    out = torch.empty(*q.shape[:-1], v.shape[-1])
    qf, kf, vf, of = (t.reshape(-1, *t.shape[-2:]) for t in (q, k, v, out))
    for i in range(qf.shape[0]):
        m = None if mask is None else mask.expand(*q.shape[:-2], q.shape[-2], k.shape[-2]).reshape(
            -1, q.shape[-2], k.shape[-2])[i]
        of[i] = _naive_in_torch(qf[i], kf[i], vf[i], chunk_size, m)
    return out


@pytest.mark.parametrize("fn, message", [(_naive_in_torch, "elements"), (_naive_in_numpy, "outside torch"),
                                         (_naive_one_head_at_a_time, "elements")])
def test_the_memory_check_fails_the_whole_matrix_however_it_is_built(fn, message):
    with pytest.raises(CheckFailed, match=message):
        run_local(_memory_check(), fn)


def test_the_memory_check_accepts_the_reference():
    run_local(_memory_check(), ref.chunked_attention)


def test_the_whole_matrix_gives_the_right_values_so_only_the_bound_can_catch_it():
    for case in cases_mod.chunked_attention_memory_cases(0):
        torch.testing.assert_close(_naive_in_torch(*case.args, **case.kwargs),
                                   ref.chunked_attention(*case.args, **case.kwargs), atol=1e-5, rtol=1e-4)
