"""Chapter 7 (backpropagation through attention): the reference against independent oracles, and the checks.

Oracles: autograd through ``torch.softmax`` and ``torch.nn.functional.scaled_dot_product_attention``
(with a bool ``attn_mask``, True = attend, or ``is_causal``), ``torch.logsumexp``, ``torch.autograd.gradcheck``
(finite differences in float64). Then the notebook's buggy layer, the case generators of
``solutions/cases/backprop.py``, and the hidden checks: their bans, and what they catch.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn.functional as F

import solutions.backprop as ref
import solutions.cases.backprop as cases_mod
from grader import cells
from grader.checks import CheckFailed, parse_checks, run_local
from solutions.scaling import softmax_vjp

from .casecheck import assert_generator_is_deterministic_and_labelled
from .design import EXERCISES as DESIGNED

NOTEBOOK = Path(__file__).resolve().parents[1] / "book" / "ch07_backprop" / "backprop.ipynb"
EXERCISES = DESIGNED["ch07_backprop"]
F64 = torch.float64


def hidden_blocks() -> dict[str, str]:
    return cells.hidden_blocks(nbformat.read(NOTEBOOK, as_version=4))


def checks_of(exercise: str):
    return parse_checks(hidden_blocks()[f"test_{exercise}"])


def randn(gen: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, dtype=F64, generator=gen) * scale


def autograd_attention(q, k, v, grad_out, mask=None):
    """Weights and (dq, dk, dv) by autograd through PyTorch's fused attention."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    scores = q.detach() @ k.detach().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1), grads


# ---------------------------------------------------------------------------------------------------
# attention_backward_from_lse


def forward_with_lse(q, k, v, causal=False):
    """(out, lse) by SDPA and torch.logsumexp (causal: top-left, as SDPA's is_causal)."""
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(), float("-inf"))
    return out, torch.logsumexp(scores, dim=-1)


@pytest.mark.parametrize("batch, T_q, T_k, d_k, d_v, causal", [
    ((), 3, 4, 2, 5, False), ((), 4, 4, 4, 4, False), ((3,), 5, 5, 4, 6, True), ((2, 3), 2, 7, 3, 5, True),
    ((2,), 6, 4, 8, 2, True), ((2,), 6, 4, 8, 2, False), ((2,), 1, 1, 4, 3, False),
])
def test_attention_backward_from_lse_matches_autograd_through_torch_sdpa(batch, T_q, T_k, d_k, d_v, causal):
    gen = torch.Generator().manual_seed(T_q * 10 + T_k)
    q, k, v = (randn(gen, *batch, T, d).requires_grad_() for T, d in ((T_q, d_k), (T_k, d_k), (T_k, d_v)))
    out, lse = forward_with_lse(q, k, v, causal)
    grad_out = randn(gen, *batch, T_q, d_v)
    expected = torch.autograd.grad(out, (q, k, v), grad_out)
    got = ref.attention_backward_from_lse(grad_out, q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(),
                                          causal=causal)
    for g, e, t in zip(got, expected, (q, k, v)):
        assert g.shape == t.shape
        torch.testing.assert_close(g, e, atol=1e-12, rtol=1e-10)


def test_attention_backward_from_lse_equals_the_backward_from_the_stored_weights():
    gen = torch.Generator().manual_seed(7)
    q, k, v, grad_out = randn(gen, 2, 5, 4), randn(gen, 2, 7, 4), randn(gen, 2, 7, 3), randn(gen, 2, 5, 3)
    out, lse = forward_with_lse(q, k, v)
    weights = torch.softmax(q @ k.transpose(-2, -1) / 2, dim=-1)
    for a, b in zip(ref.attention_backward_from_lse(grad_out, q, k, v, out, lse),
                    ref.attention_backward(grad_out, q, k, v, weights)):
        torch.testing.assert_close(a, b, atol=1e-13, rtol=1e-11)


def test_attention_backward_from_lse_stays_finite_where_exp_of_the_scores_overflows():
    gen = torch.Generator().manual_seed(8)
    q, k, v = (randn(gen, 2, T, 4, scale=30.0).requires_grad_() for T in (3, 4, 4))
    out, lse = forward_with_lse(q, k, v)
    assert (q @ k.transpose(-2, -1) / 2).detach().amax() > 710  # exp overflows float64 there
    grad_out = randn(gen, 2, 3, 4)
    expected = torch.autograd.grad(out, (q, k, v), grad_out)
    got = ref.attention_backward_from_lse(grad_out, *(t.detach() for t in (q, k, v, out, lse)))
    assert all(torch.isfinite(g).all() for g in got)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_attention_backward_from_lse_keeps_dtype_and_leaves_inputs_unchanged(dtype):
    gen = torch.Generator().manual_seed(9)
    q, k, v, grad_out = (randn(gen, 2, 3, 4).to(dtype) for _ in range(4))
    out, lse = forward_with_lse(q.double(), k.double(), v.double(), causal=True)
    lse_dtype = torch.float32 if dtype != torch.float32 else dtype
    args = (grad_out, q, k, v, out.to(dtype), lse.to(lse_dtype))
    before = [t.clone() for t in args]
    got = ref.attention_backward_from_lse(*args, causal=True)
    assert [g.dtype for g in got] == [dtype] * 3
    assert all(torch.equal(a, b) for a, b in zip(args, before))
    with pytest.raises(ValueError, match="lse"):
        ref.attention_backward_from_lse(*args[:5], lse.to(lse_dtype)[..., :2])


# ---------------------------------------------------------------------------------------------------
# attention_backward


@pytest.mark.parametrize("batch, T_q, T_k, d_k, d_v", [
    ((), 3, 4, 2, 5), ((), 4, 4, 4, 4), ((3,), 5, 5, 4, 6), ((2, 3), 2, 7, 3, 5), ((2,), 6, 4, 8, 2),
    ((2,), 1, 1, 4, 3),
])
def test_attention_backward_matches_autograd_through_torch_sdpa(batch, T_q, T_k, d_k, d_v):
    gen = torch.Generator().manual_seed(T_q * 10 + T_k)
    q, k, v = randn(gen, *batch, T_q, d_k), randn(gen, *batch, T_k, d_k), randn(gen, *batch, T_k, d_v)
    grad_out = randn(gen, *batch, T_q, d_v)
    weights, expected = autograd_attention(q, k, v, grad_out)
    got = ref.attention_backward(grad_out, q, k, v, weights)
    for g, e, t in zip(got, expected, (q, k, v)):
        assert g.shape == t.shape
        torch.testing.assert_close(g, e, atol=1e-12, rtol=1e-10)


@pytest.mark.parametrize("mask_shape", [(5, 5), (2, 1, 5, 5), (2, 1, 1, 5)])
def test_attention_backward_with_masked_weights_matches_autograd_with_the_mask(mask_shape):
    gen = torch.Generator().manual_seed(len(mask_shape))
    q, k, v = randn(gen, 2, 3, 5, 4), randn(gen, 2, 3, 5, 4), randn(gen, 2, 3, 5, 6)
    mask = torch.rand(*mask_shape, generator=gen) < 0.6
    mask[..., 0] = True  # no fully masked row
    grad_out = randn(gen, 2, 3, 5, 6)
    weights, expected = autograd_attention(q, k, v, grad_out, mask)
    for g, e in zip(ref.attention_backward(grad_out, q, k, v, weights), expected):
        torch.testing.assert_close(g, e, atol=1e-12, rtol=1e-10)


def test_attention_backward_at_saturated_logits_is_finite_and_right():
    gen = torch.Generator().manual_seed(5)
    q, k, v = randn(gen, 2, 4, 8, scale=6.0), randn(gen, 2, 6, 8, scale=6.0), randn(gen, 2, 6, 3)
    grad_out = randn(gen, 2, 4, 3)
    weights, expected = autograd_attention(q, k, v, grad_out)
    got = ref.attention_backward(grad_out, q, k, v, weights)
    assert all(torch.isfinite(g).all() for g in got)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-11, rtol=1e-9)


def test_the_popular_formulas_for_dk_are_wrong_even_when_every_matrix_is_square():
    """The course's claim: Q^T dS (the gradient of K^T) and dS Q have K's shape when T_q = T_k = d_k,
    and the wrong values; dS^T Q / sqrt(d_k) is the gradient."""
    gen = torch.Generator().manual_seed(6)
    q, k, v = randn(gen, 4, 4), randn(gen, 4, 4), randn(gen, 4, 3)  # T_q = T_k = d_k = 4
    weights = torch.softmax(q @ k.T / 2.0, dim=-1)
    grad_out = randn(gen, 4, 3)
    _, (_, dk, _) = autograd_attention(q, k, v, grad_out)
    grad_weights = grad_out @ v.T
    ds = weights * (grad_weights - (grad_weights * weights).sum(-1, keepdim=True))
    torch.testing.assert_close(ds.T @ q / 2.0, dk, atol=1e-13, rtol=1e-10)
    for wrong in (q.T @ ds / 2.0, ds @ q / 2.0):
        assert wrong.shape == dk.shape and not torch.allclose(wrong, dk, atol=1e-3)
    torch.testing.assert_close((q.T @ ds / 2.0).T, dk, atol=1e-13, rtol=1e-10)  # it is d(K^T)


def test_attention_backward_leaves_inputs_unchanged_and_rejects_mismatched_shapes():
    gen = torch.Generator().manual_seed(7)
    q, k, v = randn(gen, 2, 3, 4), randn(gen, 2, 5, 4), randn(gen, 2, 5, 6)
    weights = torch.softmax(q @ k.transpose(-2, -1) / 2.0, dim=-1)
    grad_out = randn(gen, 2, 3, 6)
    before = [t.clone() for t in (grad_out, q, k, v, weights)]
    ref.attention_backward(grad_out, q, k, v, weights)
    assert all(torch.equal(a, b) for a, b in zip((grad_out, q, k, v, weights), before))
    with pytest.raises(ValueError, match="k must have shape"):
        ref.attention_backward(grad_out, q, randn(gen, 2, 5, 3), v, weights)
    with pytest.raises(ValueError, match="weights must have shape"):
        ref.attention_backward(grad_out, q, k, v, weights.transpose(-2, -1))
    with pytest.raises(ValueError, match="grad_out must have shape"):
        ref.attention_backward(grad_out[..., :4], q, k, v, weights)


# ---------------------------------------------------------------------------------------------------
# AttentionFunction


@pytest.mark.parametrize("shapes", [((3, 2), (3, 2), (3, 2)), ((2, 3), (4, 3), (4, 2)),
                                    ((2, 2, 3), (2, 4, 3), (2, 4, 5))])
def test_attention_function_passes_gradcheck(shapes):
    gen = torch.Generator().manual_seed(len(shapes[0]))
    inputs = tuple(randn(gen, *s).requires_grad_() for s in shapes)
    assert torch.autograd.gradcheck(ref.AttentionFunction.apply, inputs)


def test_attention_function_matches_torch_sdpa_forward_and_backward_and_owns_its_grad_fn():
    gen = torch.Generator().manual_seed(8)
    q, k, v = (randn(gen, 2, 3, T, d).requires_grad_() for T, d in ((4, 8), (6, 8), (6, 5)))
    out = ref.AttentionFunction.apply(q, k, v)
    assert type(out.grad_fn).__name__ == "AttentionFunctionBackward"
    expected_out = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, expected_out)
    grad_out = randn(gen, 2, 3, 4, 5)
    got = torch.autograd.grad(out, (q, k, v), grad_out)
    expected = torch.autograd.grad(expected_out, (q, k, v), grad_out)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-12, rtol=1e-10)


def test_attention_function_keeps_float32_and_is_stable_at_huge_logits():
    q, k, v = torch.randn(2, 4, 8) * 100, torch.randn(2, 6, 8) * 100, torch.randn(2, 6, 3)
    q.requires_grad_()
    out = ref.AttentionFunction.apply(q, k, v)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    out.sum().backward()
    assert q.grad.dtype == torch.float32 and torch.isfinite(q.grad).all()


# ---------------------------------------------------------------------------------------------------
# CrossAttentionFunction and the notebook's buggy layer


def plain_cross_attention(x, y, W_q, W_k, W_v):
    return F.scaled_dot_product_attention(x @ W_q, y @ W_k, y @ W_v)


def cross_inputs(gen, batch, T_q, T_k, d_x=3, d_y=4, d_k=2, d_v=3):
    shapes = ((*batch, T_q, d_x), (*batch, T_k, d_y), (d_x, d_k), (d_y, d_k), (d_y, d_v))
    return tuple(randn(gen, *s).requires_grad_() for s in shapes)


@pytest.mark.parametrize("batch, T_q, T_k", [((), 4, 4), ((), 3, 5), ((2,), 4, 2), ((2, 2), 3, 3)])
def test_cross_attention_function_matches_autograd_and_passes_gradcheck(batch, T_q, T_k):
    gen = torch.Generator().manual_seed(T_q + 10 * T_k)
    inputs = cross_inputs(gen, batch, T_q, T_k)
    out = ref.CrossAttentionFunction.apply(*inputs)
    torch.testing.assert_close(out, plain_cross_attention(*inputs))
    grad_out = randn(gen, *out.shape)
    got = torch.autograd.grad(out, inputs, grad_out)
    expected = torch.autograd.grad(plain_cross_attention(*inputs), inputs, grad_out)
    for g, e, t in zip(got, expected, inputs):
        assert g.shape == t.shape
        torch.testing.assert_close(g, e, atol=1e-12, rtol=1e-10)
    if batch == ():
        assert torch.autograd.gradcheck(ref.CrossAttentionFunction.apply, inputs)


def test_cross_attention_as_self_attention_adds_the_gradients_of_all_three_paths():
    gen = torch.Generator().manual_seed(9)
    x = randn(gen, 2, 5, 6).requires_grad_()
    weights = tuple(randn(gen, 6, d).requires_grad_() for d in (3, 3, 4))
    out = ref.CrossAttentionFunction.apply(x, x, *weights)
    grad_out = randn(gen, *out.shape)
    (got,) = torch.autograd.grad(out, x, grad_out)
    (expected,) = torch.autograd.grad(plain_cross_attention(x, x, *weights), x, grad_out)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-10)


def notebook_cell(cell_id: str) -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    return next(c.source for c in nb.cells if c.get("id") == cell_id)


def test_the_notebooks_buggy_layer_passes_a_self_attention_shape_test_but_not_gradcheck():
    namespace: dict = {"math": math, "torch": torch}
    exec(compile(notebook_cell("buggy"), "<buggy>", "exec"), namespace)
    buggy = namespace["BuggyCrossAttention"]
    gen = torch.Generator().manual_seed(10)
    x = randn(gen, 2, 5, 8).requires_grad_()
    weights = tuple(randn(gen, 8, d).requires_grad_() for d in (4, 4, 6))
    buggy.apply(x, x, *weights).pow(2).sum().backward()
    assert x.grad.shape == x.shape and all(w.grad.shape == w.shape for w in weights)
    square = cross_inputs(gen, (), 4, 4)
    assert not torch.autograd.gradcheck(buggy.apply, square, raise_exception=False)
    grad_out = randn(gen, 4, 3)
    got = torch.autograd.grad(buggy.apply(*square), square, grad_out)
    expected = torch.autograd.grad(plain_cross_attention(*square), square, grad_out)
    right = [torch.allclose(g, e, atol=1e-10) for g, e in zip(got, expected)]
    assert right == [True, False, True, False, True]  # x, W_q, W_v right; y and W_k wrong
    with pytest.raises(RuntimeError):
        buggy.apply(*cross_inputs(gen, (), 3, 5)).sum().backward()


# ---------------------------------------------------------------------------------------------------
# case generators


GENERATORS = [(name, {} if dtype == "float64" else {"dtype": dtype})
              for name in ("attention_backward_from_lse_cases", "attention_backward_cases",
                           "attention_function_cases", "cross_attention_cases")
              for dtype in ("float64", "float32", "float16", "bfloat16")]


@pytest.mark.parametrize("seed", [0, 3])
def test_case_generators_are_deterministic_labelled_and_non_empty(seed):
    for name, params in GENERATORS:
        assert_generator_is_deterministic_and_labelled(getattr(cases_mod, name), seed, params)


def test_generators_reject_an_unknown_dtype():
    with pytest.raises(ValueError, match="dtype"):
        cases_mod.attention_backward_from_lse_cases(seed=0, dtype="float8")


def test_lse_cases_carry_the_forward_passes_out_and_lse_with_causal_both_ways_and_overflowing_scores():
    cases = cases_mod.attention_backward_from_lse_cases(seed=0)
    kinds = set()
    for c in cases:
        grad_out, q, k, v, out, lse = c.args
        causal = c.kwargs.get("causal", False)
        want_out, want_lse = forward_with_lse(q, k, v, causal)
        torch.testing.assert_close(out, want_out, atol=1e-12, rtol=1e-12)
        torch.testing.assert_close(lse, want_lse, atol=1e-12, rtol=1e-12)
        T_q, T_k = q.shape[-2], k.shape[-2]
        kinds.add((causal, "square" if T_q == T_k else "wide" if T_q < T_k else "tall"))
        if (q @ k.transpose(-2, -1)).amax() / math.sqrt(q.shape[-1]) > 710:
            kinds.add("overflow")
    assert kinds >= {(True, "square"), (True, "wide"), (True, "tall"), (False, "square"), (False, "wide"),
                     (False, "tall"), "overflow"}
    assert any("causal" not in c.kwargs for c in cases) and any(c.kwargs.get("causal") is False for c in cases)
    assert any(not c.args[1].is_contiguous() for c in cases)
    for dtype in ("float32", "float16", "bfloat16"):
        for c in cases_mod.attention_backward_from_lse_cases(0, dtype=dtype):
            assert all(t.dtype == getattr(torch, dtype) for t in c.args[:5])
            assert c.args[5].dtype == (torch.float32 if dtype != "float64" else torch.float64)


def test_the_lse_checks_fail_a_recomputed_softmax_an_unstable_one_and_a_bottom_right_mask():
    def recompute(how):
        def fn(grad_out, q, k, v, out, lse, causal=False):
            s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            T_q, T_k = s.shape[-2:]
            if causal:
                diagonal = T_k - T_q if how == "bottom_right" else 0
                s = s.masked_fill(~torch.ones(T_q, T_k, dtype=torch.bool).tril(diagonal), float("-inf"))
            if how == "softmax":
                p = torch.softmax(s, dim=-1)
            elif how == "exp_over_sum":
                p = s.exp() / s.exp().sum(-1, keepdim=True)
            else:
                p = torch.exp(s - lse[..., None])
            weights = p
            return ref.attention_backward(grad_out, q, k, v, weights)
        return fn

    check = checks_of("attention_backward_from_lse")[0]
    run_local(check, recompute("lse"))  # the right answer through attention_backward passes
    with pytest.raises(CheckFailed, match="must not call"):
        run_local(check, recompute("softmax"))
    with pytest.raises(CheckFailed, match="scores up to ~1000"):
        run_local(check, recompute("exp_over_sum"))
    with pytest.raises(CheckFailed, match="is wrong on case .*causal=True"):
        run_local(check, recompute("bottom_right"))


def test_attention_backward_cases_carry_the_true_weights_and_cover_square_cross_batched_and_masked():
    cases = cases_mod.attention_backward_cases(seed=0)
    shapes = set()
    for c in cases:
        grad_out, q, k, v, weights = c.args
        assert grad_out.shape[-2:] == (q.shape[-2], v.shape[-1]) and weights.shape[-2:] == (q.shape[-2], k.shape[-2])
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))
        shapes.add((q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1], q.dim()))
    assert any(T_q == T_k == d_k == d_v for T_q, T_k, d_k, d_v, _ in shapes)
    assert any(T_q != T_k and d_k != d_v for T_q, T_k, d_k, d_v, _ in shapes)
    assert any(T_q > T_k for T_q, T_k, *_ in shapes) and any(T_q < T_k for T_q, T_k, *_ in shapes)
    assert {dims for *_, dims in shapes} >= {2, 3, 4}
    assert sum(bool((c.args[4] == 0).any()) for c in cases) >= 2  # masked weights


def test_gradient_cases_call_apply_with_a_matching_grad_output():
    for name in ("attention_function_cases", "cross_attention_cases"):
        cases = getattr(cases_mod, name)(seed=0)
        Ts = set()
        for c in cases:
            assert c.method == "apply" and c.grad_output is not None
            out = getattr(ref, "AttentionFunction" if name.startswith("attention") else "CrossAttentionFunction") \
                .apply(*c.args)
            assert c.grad_output.shape == out.shape and c.grad_output.dtype == out.dtype == F64
            Ts.add(c.args[0].shape[-2] == c.args[1].shape[-2])
        assert Ts == {True, False}, name  # square and non-square cases
        assert any(not c.grad_output.is_contiguous() for c in cases), name
        for dtype in ("float32", "float16", "bfloat16"):
            for c in getattr(cases_mod, name)(seed=0, dtype=dtype):
                assert c.grad_output.dtype == c.args[0].dtype == getattr(torch, dtype)


def test_cross_attention_cases_include_self_attention_with_equal_inputs():
    cases = cases_mod.cross_attention_cases(seed=0)
    assert any(torch.equal(c.args[0], c.args[1]) for c in cases)
    assert any(c.args[0].dim() == 4 for c in cases)


# ---------------------------------------------------------------------------------------------------
# the notebook's hidden checks


def test_hidden_checks_compare_in_float64_at_gradcheck_strength_or_tighter():
    for name in EXERCISES:
        strict = [c for c in checks_of(name) if dict(c.params).get("dtype", "float64") == "float64"]
        assert strict and all(c.atol <= 1e-10 and c.rtol <= 1e-8 for c in strict), name


def test_hidden_checks_ban_autograd_and_the_builtin_backward_kernels():
    for name in EXERCISES:
        for check in checks_of(name):
            assert {"torch.autograd.grad", "aten._softmax_backward_data", "aten._scaled_dot_product*",
                    "torch.nn.functional.scaled_dot_product_attention"} <= set(check.banned), name
    for name in ("attention_backward_from_lse", "attention_backward"):
        assert all("torch.Tensor.backward" in c.banned for c in checks_of(name))
    # gradient cases back-propagate with Tensor.backward themselves: banning it would fail every answer
    for name in ("AttentionFunction", "CrossAttentionFunction"):
        assert all("torch.Tensor.backward" not in c.banned for c in checks_of(name))


def _rebuilt_forward(q, k, v, lse):
    return torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) - lse[..., None]) @ v


def vjp_from_lse(grad_out, q, k, v, out, lse, causal=False):
    return torch.func.vjp(lambda *qkv: _rebuilt_forward(*qkv, lse), q, k, v)[1](grad_out)


def functional_vjp_from_lse(grad_out, q, k, v, out, lse, causal=False):
    return torch.autograd.functional.vjp(lambda *qkv: _rebuilt_forward(*qkv, lse), (q, k, v), grad_out)[1]


@pytest.mark.parametrize("fn", [vjp_from_lse, functional_vjp_from_lse])
def test_torch_func_and_functional_vjps_are_caught_through_torch_autograd_grad(fn):
    check = checks_of("attention_backward_from_lse")[0]
    with pytest.raises(CheckFailed, match="must not call torch.autograd.grad"):
        run_local(check, fn)


class AutogradThroughTorchSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return ref.AttentionFunction.forward(ctx, q, k, v)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = (t.detach().requires_grad_() for t in ctx.saved_tensors[:3])
        with torch.enable_grad():
            out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v
            return torch.autograd.grad(out, (q, k, v), grad_out)


class AutogradThroughManualSoftmax(AutogradThroughTorchSoftmax):
    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = (t.detach().requires_grad_() for t in ctx.saved_tensors[:3])
        with torch.enable_grad():
            s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            e = (s - s.amax(-1, keepdim=True).detach()).exp()
            return torch.autograd.grad((e / e.sum(-1, keepdim=True)) @ v, (q, k, v), grad_out)


def test_the_function_check_catches_autograd_through_torch_softmax_inside_backward():
    with pytest.raises(CheckFailed, match="must not call .*aten._softmax_backward_data"):
        run_local(checks_of("AttentionFunction")[0], AutogradThroughTorchSoftmax)


def test_the_function_check_catches_autograd_grad_inside_backward_whatever_the_forward():
    with pytest.raises(CheckFailed, match="must not call torch.autograd.grad"):
        run_local(checks_of("AttentionFunction")[0], AutogradThroughManualSoftmax)


@pytest.mark.parametrize("exercise, wrong", [
    ("attention_backward", "popular"), ("attention_backward", "transposed"),
    ("AttentionFunction", "transposed"), ("CrossAttentionFunction", "transposed"),
])
def test_hidden_checks_fail_a_transposed_dk_with_a_message_naming_the_case(exercise, wrong):
    def wrong_backward(grad_out, q, k, v, weights):
        grad_q, _, grad_v = ref.attention_backward(grad_out, q, k, v, weights)
        grad_weights = grad_out @ v.transpose(-2, -1)
        grad_scores = softmax_vjp(weights, grad_weights)
        if wrong == "popular":
            return grad_q, q.transpose(-2, -1) @ grad_scores / math.sqrt(q.shape[-1]), grad_v
        return grad_q, grad_scores @ q / math.sqrt(q.shape[-1]), grad_v

    if exercise == "attention_backward":
        target = wrong_backward
    else:
        base = getattr(ref, exercise)

        class Wrong(base):
            @staticmethod
            def backward(ctx, grad_out):
                original = ref.attention_backward
                ref.attention_backward = wrong_backward  # the reference backward calls it by module name
                try:
                    return base.backward(ctx, grad_out)
                finally:
                    ref.attention_backward = original

        target = Wrong
    with pytest.raises(CheckFailed, match=r"(is wrong on|raised on) case '.+'"):
        run_local(checks_of(exercise)[0], target)


def test_the_reference_passes_every_hidden_check_case_by_case():
    for name in EXERCISES:
        for check in checks_of(name):
            run_local(check, getattr(ref, name))


def test_no_case_has_a_fully_masked_row():
    """Fully masked rows (0/0) are chapter 4's business: no case may contain one."""
    for c in cases_mod.attention_backward_cases(seed=2):
        assert (c.args[4].sum(-1) > 0.5).all(), c.label
