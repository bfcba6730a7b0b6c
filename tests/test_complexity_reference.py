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
    with pytest.raises(ValueError, match="chunk_size"):
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


GENERATORS = ["attention_flops_cases", "attention_matrix_bytes_cases", "rnn_flops_cases", "loglog_slope_cases",
              "chunked_attention_cases", "chunked_attention_memory_cases"]


@pytest.mark.parametrize("name", GENERATORS)
def test_case_generators_are_deterministic_labelled_and_non_empty(name):
    assert_generator_is_deterministic_and_labelled(getattr(cases_mod, name), 3)


def test_counting_cases_need_exact_integers_and_cover_every_parameter():
    flops = cases_mod.attention_flops_cases(0)
    assert any(c.kwargs.get("causal") and c.args[0] % 2 for c in flops)
    assert any(len(c.args) > 2 for c in flops) and any("heads" in c.kwargs for c in flops)
    assert any(int(float(n)) != n for n in (ref.attention_flops(*c.args, **c.kwargs) for c in flops))
    assert any(int(float(n)) != n for n in (ref.rnn_flops(*c.args, **c.kwargs) for c in cases_mod.rnn_flops_cases(0)))
    dtypes = {c.kwargs.get("dtype", c.args[3] if len(c.args) > 3 else torch.float32)
              for c in cases_mod.attention_matrix_bytes_cases(0)}
    assert dtypes >= {torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.bool}


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
        assert T_q * T_k > 2 * c.max_numel, c.label  # a single head's matrix does not fit
        assert 8 * T_q * T_k * 4 > 8 * c.max_numel + 256 * 1024, c.label  # not even as numpy float32
        with LargestTensor() as meter:
            ref.chunked_attention(q, k, v, chunk, **c.kwargs)
        assert meter.numel <= c.max_numel, c.label


# ---------------------------------------------------------------------------------------------------
# the notebook's hidden checks


def test_chunked_attention_is_checked_for_values_and_for_memory_with_sdpa_banned():
    checks = parse_checks(hidden_blocks()["test_chunked_attention"])
    assert {c.cases.rpartition(":")[2] for c in checks} == {"chunked_attention_cases", "chunked_attention_memory_cases"}
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
