"""Chapter 1 (the RNN bottleneck): the reference against independent oracles, and the hidden checks.

Oracles: ``nn.RNN`` with copied weights (``batch_first``, tanh), ``nn.RNNCell``, ``torch.autograd.gradcheck``,
the additive score written with explicit loops in column-vector notation (``v^T tanh(W_q^T q + W_k^T k)``)
and as a two-layer ``nn.Sequential``, and ``torch.nn.functional.scaled_dot_product_attention`` with the
scores passed as an additive float mask; for ``bahdanau_decoder_step``, the paper's equations written as a
loop (column-vector notation, one sequence and one source position at a time, the tanh cell unrolled by
``nn.RNNCell`` over the concatenated input ``[y_{i-1}; c_i]``), autograd and gradcheck. Then the case
generators, the ``nn.RNN`` reference wrapper and the judges of ``solutions/cases/rnn_bottleneck.py``, and
every hidden check of the notebook.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import solutions.cases.rnn_bottleneck as cases_mod
import solutions.rnn_bottleneck as ref
from grader import cells
from grader.checks import Case, CheckFailed, evaluate, from_plain, parse_checks, run_local

from .casecheck import assert_generator_is_deterministic_and_labelled

NOTEBOOK = Path(__file__).resolve().parents[1] / "book" / "ch01_rnn_bottleneck" / "rnn_bottleneck.ipynb"

def hidden_blocks() -> dict[str, str]:
    return cells.hidden_blocks(nbformat.read(NOTEBOOK, as_version=4))


def rnn_weights(d_in: int, H: int, gen: torch.Generator, dtype=torch.float32):
    W_xh = torch.randn(d_in, H, generator=gen, dtype=dtype) / d_in ** 0.5
    W_hh = torch.randn(H, H, generator=gen, dtype=dtype) / H ** 0.5
    b_h = torch.randn(H, generator=gen, dtype=dtype) * 0.5
    return W_xh, W_hh, b_h


def copied_nn_rnn(W_xh, W_hh, b_h) -> nn.RNN:
    d_in, H = W_xh.shape
    rnn = nn.RNN(d_in, H, nonlinearity="tanh", batch_first=True, dtype=W_xh.dtype)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(W_xh.T)
        rnn.weight_hh_l0.copy_(W_hh.T)
        rnn.bias_ih_l0.copy_(b_h)
        rnn.bias_hh_l0.zero_()
    return rnn


# ---------------------------------------------------------------------------------------------------
# rnn_forward


@pytest.mark.parametrize("with_h0", [False, True])
@pytest.mark.parametrize("B, T, d_in, H, dtype", [
    (2, 5, 3, 4, torch.float32), (3, 1, 5, 2, torch.float32), (4, 20, 6, 7, torch.float64),
])
def test_rnn_forward_matches_nn_rnn_with_copied_weights(B, T, d_in, H, dtype, with_h0):
    gen = torch.Generator().manual_seed(B * 100 + T)
    x = torch.randn(B, T, d_in, generator=gen, dtype=dtype)
    W_xh, W_hh, b_h = rnn_weights(d_in, H, gen, dtype)
    h0 = torch.tanh(torch.randn(B, H, generator=gen, dtype=dtype)) if with_h0 else None
    outputs, h_T = ref.rnn_forward(x, W_xh, W_hh, b_h, h0)
    with torch.no_grad():
        expected, h_n = copied_nn_rnn(W_xh, W_hh, b_h)(x, None if h0 is None else h0[None])
    assert outputs.shape == (B, T, H) and h_T.shape == (B, H) and outputs.dtype == dtype
    torch.testing.assert_close(outputs, expected)
    torch.testing.assert_close(h_T, h_n[0])


def test_rnn_forward_matches_a_loop_of_nn_rnn_cells_one_sequence_at_a_time():
    gen = torch.Generator().manual_seed(0)
    x, h0 = torch.randn(3, 6, 4, generator=gen), torch.randn(3, 5, generator=gen)
    W_xh, W_hh, b_h = rnn_weights(4, 5, gen)
    cell = nn.RNNCell(4, 5)
    with torch.no_grad():
        cell.weight_ih.copy_(W_xh.T)
        cell.weight_hh.copy_(W_hh.T)
        cell.bias_ih.copy_(b_h)
        cell.bias_hh.zero_()
    outputs, h_T = ref.rnn_forward(x, W_xh, W_hh, b_h, h0)
    with torch.no_grad():
        for b in range(3):
            h = h0[b]
            for t in range(6):
                h = cell(x[b, t], h)
                torch.testing.assert_close(outputs[b, t], h)
            torch.testing.assert_close(h_T[b], h)


def test_rnn_forward_is_the_formula_for_one_step_by_hand():
    x = torch.tensor([[[1.0, 2.0]]])              # (B=1, T=1, d_in=2)
    W_xh = torch.tensor([[0.5, 0.0, 1.0], [0.0, -0.5, 0.0]])  # (2, 3)
    W_hh = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [2.0, 0.0, 0.0]])  # (3, 3), not symmetric
    b_h = torch.tensor([0.0, 1.0, -1.0])
    h0 = torch.tensor([[1.0, 0.0, 0.5]])
    # a = x W_xh + h0 W_hh + b = [0.5, -1, 1] + [1, 1, 0] + [0, 1, -1] = [1.5, 1, 0]
    outputs, h_T = ref.rnn_forward(x, W_xh, W_hh, b_h, h0)
    torch.testing.assert_close(outputs, torch.tanh(torch.tensor([[[1.5, 1.0, 0.0]]])))
    torch.testing.assert_close(h_T, outputs[:, 0])


def test_rnn_forward_supports_any_leading_batch_dims_and_no_batch():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 5, 4, generator=gen)
    W_xh, W_hh, b_h = rnn_weights(4, 6, gen)
    outputs, h_T = ref.rnn_forward(x, W_xh, W_hh, b_h)
    single, h_single = ref.rnn_forward(x[1, 2], W_xh, W_hh, b_h)  # (T, d_in): one unbatched sequence
    assert outputs.shape == (2, 3, 5, 6) and h_T.shape == (2, 3, 6)
    torch.testing.assert_close(outputs[1, 2], single)
    torch.testing.assert_close(h_T[1, 2], h_single)


def test_rnn_forward_gradients_pass_gradcheck_in_float64():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64)
    W_xh, W_hh, b_h = rnn_weights(3, 5, gen, torch.float64)
    h0 = torch.randn(2, 5, generator=gen, dtype=torch.float64)
    inputs = [t.clone().requires_grad_() for t in (x, W_xh, W_hh, b_h, h0)]
    assert torch.autograd.gradcheck(lambda *a: ref.rnn_forward(*a), inputs)


def test_rnn_forward_of_an_empty_sequence_returns_the_initial_state():
    W_xh, W_hh, b_h = rnn_weights(3, 4, torch.Generator().manual_seed(3))
    h0 = torch.randn(2, 4)
    outputs, h_T = ref.rnn_forward(torch.randn(2, 0, 3), W_xh, W_hh, b_h, h0)
    assert outputs.shape == (2, 0, 4)
    assert torch.equal(h_T, h0) and h_T is not h0
    _, h_zero = ref.rnn_forward(torch.randn(2, 0, 3, dtype=torch.float64), *(w.double() for w in (W_xh, W_hh, b_h)))
    assert torch.equal(h_zero, torch.zeros(2, 4, dtype=torch.float64))


def test_rnn_forward_leaves_inputs_unchanged_and_keeps_the_dtype():
    gen = torch.Generator().manual_seed(4)
    x, h0 = torch.randn(2, 5, 3, generator=gen, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    args = (x, *rnn_weights(3, 4, gen, torch.float64), h0)
    before = [t.clone() for t in args]
    outputs, h_T = ref.rnn_forward(*args)
    assert all(torch.equal(a, b) for a, b in zip(args, before))
    assert outputs.dtype == h_T.dtype == torch.float64
    assert ref.rnn_forward(*args[:4])[1].dtype == torch.float64  # the default zero state too


def test_rnn_forward_rejects_weights_that_do_not_fit():
    x = torch.randn(2, 5, 3)
    W_xh, W_hh, b_h = rnn_weights(3, 4, torch.Generator().manual_seed(5))
    with pytest.raises(ValueError, match="W_xh must have shape"):
        ref.rnn_forward(x, W_xh.T, W_hh, b_h)
    with pytest.raises(ValueError, match="W_hh must have shape"):
        ref.rnn_forward(x, W_xh, W_hh[:, :3], b_h)
    with pytest.raises(ValueError, match="b_h must have shape"):
        ref.rnn_forward(x, W_xh, W_hh, b_h[:3])
    with pytest.raises(ValueError, match="h0 must have shape"):
        ref.rnn_forward(x, W_xh, W_hh, b_h, torch.zeros(1, 2, 4))  # nn.RNN's (num_layers, B, H)
    with pytest.raises(ValueError, match="x must have shape"):
        ref.rnn_forward(torch.randn(3), W_xh, W_hh, b_h)


def test_rnn_forward_states_forget_the_first_input_exponentially():
    """The point of the chapter, pinned down: with ||W_hh||_2 = 0.5 (and |tanh'| <= 1) every step shrinks
    d h_t / d x_1 at least by half, so ||d h_{t+4} / d x_1||_F <= 0.5^4 ||d h_t / d x_1||_F."""
    gen = torch.Generator().manual_seed(6)
    W_xh, W_hh, b_h = rnn_weights(3, 8, gen, torch.float64)
    W_hh = 0.5 * W_hh / torch.linalg.matrix_norm(W_hh, ord=2)
    x = torch.randn(1, 10, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    outputs, _ = ref.rnn_forward(x, W_xh, W_hh, b_h)
    norms = []
    for t in (1, 5, 9):  # h_2, h_6, h_10 of the same run
        rows = [torch.autograd.grad(outputs[0, t, i], x, retain_graph=True)[0][0, 0] for i in range(8)]
        norms.append(float(torch.stack(rows).norm()))
    assert norms[0] > 0
    assert norms[1] <= 0.5 ** 4 * norms[0] * (1 + 1e-12) and norms[2] <= 0.5 ** 4 * norms[1] * (1 + 1e-12)


# ---------------------------------------------------------------------------------------------------
# additive_scores


def additive_by_loops(query, keys, W_q, W_k, v):
    """Column-vector notation of the paper, one (batch, position) pair at a time."""
    B, T, _ = keys.shape
    out = torch.empty(B, T, dtype=query.dtype)
    for b in range(B):
        for t in range(T):
            out[b, t] = v @ torch.tanh(W_q.T @ query[b] + W_k.T @ keys[b, t])
    return out


@pytest.mark.parametrize("B, T, d_q, d_k, a", [(2, 5, 3, 4, 6), (4, 4, 5, 2, 3), (1, 1, 2, 2, 2), (3, 7, 6, 5, 1)])
def test_additive_scores_match_the_papers_formula_written_with_loops(B, T, d_q, d_k, a):
    gen = torch.Generator().manual_seed(B + T)
    query, keys = torch.randn(B, d_q, generator=gen), torch.randn(B, T, d_k, generator=gen)
    W_q, W_k, v = torch.randn(d_q, a, generator=gen), torch.randn(d_k, a, generator=gen), torch.randn(a, generator=gen)
    scores = ref.additive_scores(query, keys, W_q, W_k, v)
    assert scores.shape == (B, T)
    torch.testing.assert_close(scores, additive_by_loops(query, keys, W_q, W_k, v))


def test_additive_scores_are_a_one_hidden_layer_network_on_the_concatenation():
    """Luong's "concat" score, v^T tanh(W [q; k]), is the same function with W = [W_q; W_k]."""
    torch.manual_seed(0)
    d_q, d_k, a = 3, 5, 4
    net = nn.Sequential(nn.Linear(d_q + d_k, a, bias=False), nn.Tanh(), nn.Linear(a, 1, bias=False))
    W = net[0].weight.T.detach()  # (d_q + d_k, a)
    query, keys = torch.randn(2, d_q), torch.randn(2, 6, d_k)
    with torch.no_grad():
        expected = net(torch.cat([query[:, None].expand(2, 6, d_q), keys], dim=-1)).squeeze(-1)
    got = ref.additive_scores(query, keys, W[:d_q], W[d_q:], net[2].weight[0].detach())
    torch.testing.assert_close(got, expected)


def test_additive_scores_are_bounded_by_the_l1_norm_of_v_and_keep_dtype():
    gen = torch.Generator().manual_seed(7)
    query, keys = 50 * torch.randn(3, 4, generator=gen, dtype=torch.float64), \
        50 * torch.randn(3, 9, 2, generator=gen, dtype=torch.float64)
    W_q = torch.randn(4, 5, generator=gen, dtype=torch.float64)
    W_k = torch.randn(2, 5, generator=gen, dtype=torch.float64)
    v = torch.randn(5, generator=gen, dtype=torch.float64)
    scores = ref.additive_scores(query, keys, W_q, W_k, v)
    assert scores.dtype == torch.float64 and bool((scores.abs() <= v.abs().sum() + 1e-12).all())


def test_additive_scores_leave_inputs_unchanged_and_reject_bad_shapes():
    query, keys = torch.randn(2, 3), torch.randn(2, 5, 4)
    W_q, W_k, v = torch.randn(3, 6), torch.randn(4, 6), torch.randn(6)
    args = (query, keys, W_q, W_k, v)
    before = [t.clone() for t in args]
    ref.additive_scores(*args)
    assert all(torch.equal(a, b) for a, b in zip(args, before))
    with pytest.raises(ValueError, match="W_q must have shape"):
        ref.additive_scores(query, keys, W_k, W_k, v)
    with pytest.raises(ValueError, match="W_k must have shape"):
        ref.additive_scores(query, keys, W_q, W_q, v)
    with pytest.raises(ValueError, match="attention width"):
        ref.additive_scores(query, keys, W_q, W_k, torch.randn(5))
    with pytest.raises(ValueError, match="keys must have shape"):
        ref.additive_scores(query, torch.randn(3, 5, 4), W_q, W_k, v)


# ---------------------------------------------------------------------------------------------------
# attention_pool


def sdpa_pool(scores, values, mask=None):
    """The same pooling by PyTorch's attention: one zero query and zero keys, the scores as a float mask."""
    B, T = scores.shape
    bias = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
    q, k = torch.zeros(B, 1, 1, dtype=scores.dtype), torch.zeros(B, T, 1, dtype=scores.dtype)
    return F.scaled_dot_product_attention(q, k, values, attn_mask=bias[:, None, :]).squeeze(1)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("B, T, d_v", [(2, 5, 3), (5, 5, 2), (1, 1, 4), (3, 8, 6)])
def test_attention_pool_matches_torch_sdpa(B, T, d_v, masked):
    gen = torch.Generator().manual_seed(B * 10 + T)
    scores, values = 3 * torch.randn(B, T, generator=gen), torch.randn(B, T, d_v, generator=gen)
    mask = None
    if masked:
        mask = torch.rand(B, T, generator=gen) < 0.5
        mask[:, 0] = True
    context, weights = ref.attention_pool(scores, values, mask)
    assert context.shape == (B, d_v) and weights.shape == (B, T)
    torch.testing.assert_close(context, sdpa_pool(scores, values, mask))
    torch.testing.assert_close(weights.sum(-1), torch.ones(B))
    if mask is not None:
        assert bool((weights[~mask] == 0).all())


def test_attention_pool_is_not_disturbed_by_garbage_scores_at_masked_positions():
    gen = torch.Generator().manual_seed(8)
    scores, values = torch.randn(3, 6, generator=gen), torch.randn(3, 6, 2, generator=gen)
    mask = torch.arange(6) < torch.tensor([6, 4, 1])[:, None]
    garbage = scores.masked_fill(~mask, 1e4)
    for a, b in zip(ref.attention_pool(scores, values, mask), ref.attention_pool(garbage, values, mask)):
        torch.testing.assert_close(a, b)
    context, weights = ref.attention_pool(garbage, values, mask)
    assert torch.equal(weights[2], torch.tensor([1.0, 0, 0, 0, 0, 0])) and torch.equal(context[2], values[2, 0])


def test_attention_pool_is_stable_at_large_scores_and_keeps_dtype():
    scores = torch.tensor([[1000.0, 999.0, -1000.0]], dtype=torch.float64)
    values = torch.tensor([[[1.0], [2.0], [3.0]]], dtype=torch.float64)
    context, weights = ref.attention_pool(scores, values)
    p = 1 / (1 + torch.e ** -1)
    torch.testing.assert_close(weights, torch.tensor([[p, 1 - p, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(context, torch.tensor([[p + 2 * (1 - p)]], dtype=torch.float64))


def test_attention_pool_of_a_fully_masked_row_is_nan_as_documented():
    _, weights = ref.attention_pool(torch.randn(2, 3), torch.randn(2, 3, 2),
                                    torch.tensor([[True, False, False], [False, False, False]]))
    assert not weights[0].isnan().any() and weights[1].isnan().all()


def test_attention_pool_leaves_inputs_unchanged_and_rejects_bad_input():
    scores, values, mask = torch.randn(2, 4), torch.randn(2, 4, 3), torch.tensor([[True] * 4, [True, False] * 2])
    before = [t.clone() for t in (scores, values, mask)]
    ref.attention_pool(scores, values, mask)
    assert all(torch.equal(a, b) for a, b in zip((scores, values, mask), before))
    with pytest.raises(TypeError, match="bool tensor"):
        ref.attention_pool(scores, values, mask.float())
    with pytest.raises(ValueError, match="values must have shape"):
        ref.attention_pool(scores, torch.randn(2, 5, 3))
    with pytest.raises(ValueError, match="does not fit"):
        ref.attention_pool(scores, values, torch.ones(3, 4, dtype=torch.bool))


# ---------------------------------------------------------------------------------------------------
# bahdanau_decoder_step


def decoder_inputs(B, T, H, d_y, d_h, a, gen, dtype=torch.float32):
    def r(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen, dtype=dtype) * scale

    return (torch.tanh(r(B, H)), r(B, d_y), r(B, T, d_h), r(H, a, scale=H ** -0.5), r(d_h, a, scale=d_h ** -0.5),
            r(a), r(d_y, H, scale=d_y ** -0.5), r(H, H, scale=H ** -0.5), r(d_h, H, scale=d_h ** -0.5), r(H, scale=0.5))


def loop_from_the_paper(s_prev, y_prev, h, W_a, U_a, v_a, W_y, W_s, W_c, b, mask=None):
    """Bahdanau et al. (2015), eqs. (5)-(6) and the appendix's alignment model e_ij = v_a^T tanh(W_a s_{i-1} +
    U_a h_j), in column-vector notation (our row-vector weights transposed), one sequence and one position at a
    time; the recurrent update s_i = f(s_{i-1}, y_{i-1}, c_i) by nn.RNNCell on the input [y_{i-1}; c_i]."""
    B, T, d_h = h.shape
    d_y, H = W_y.shape
    cell = nn.RNNCell(d_y + d_h, H, nonlinearity="tanh", dtype=h.dtype)
    with torch.no_grad():
        cell.weight_ih.copy_(torch.cat([W_y, W_c], dim=0).T)
        cell.weight_hh.copy_(W_s.T)
        cell.bias_ih.copy_(b)
        cell.bias_hh.zero_()
    allowed = torch.ones(B, T, dtype=torch.bool) if mask is None else mask.expand(B, T)
    states, contexts, weights = [], [], []
    for i in range(B):
        e = torch.stack([v_a @ torch.tanh(W_a.T @ s_prev[i] + U_a.T @ h[i, j]) for j in range(T)])
        e = torch.where(allowed[i], e, torch.tensor(float("-inf"), dtype=h.dtype))
        alpha = torch.exp(e - e.max()) / torch.exp(e - e.max()).sum()
        c = sum(alpha[j] * h[i, j] for j in range(T))
        with torch.no_grad():
            states.append(cell(torch.cat([y_prev[i], c])[None], s_prev[i][None])[0])
        contexts.append(c)
        weights.append(alpha)
    return torch.stack(states), torch.stack(contexts), torch.stack(weights)


@pytest.mark.parametrize("masked", ["none", "padding", "1-D"])
@pytest.mark.parametrize("B, T, H, d_y, d_h, a", [(2, 5, 4, 3, 6, 7), (4, 4, 3, 5, 2, 6), (1, 1, 2, 2, 2, 2)])
def test_decoder_step_matches_a_loop_over_the_papers_equations(B, T, H, d_y, d_h, a, masked):
    gen = torch.Generator().manual_seed(B * 10 + T)
    args = decoder_inputs(B, T, H, d_y, d_h, a, gen, torch.float64)
    mask = None
    if masked == "padding":
        mask = torch.arange(T) < torch.randint(1, T + 1, (B,), generator=gen)[:, None]
    elif masked == "1-D":
        mask = torch.rand(T, generator=gen) < 0.5
        mask[-1] = True
    s, c, alpha = ref.bahdanau_decoder_step(*args, mask)
    s_ref, c_ref, alpha_ref = loop_from_the_paper(*args, mask)
    assert s.shape == (B, H) and c.shape == (B, d_h) and alpha.shape == (B, T)
    torch.testing.assert_close(alpha, alpha_ref)
    torch.testing.assert_close(c, c_ref)
    torch.testing.assert_close(s, s_ref)


def test_decoder_step_queries_the_previous_state_and_feeds_the_context_into_the_cell():
    """The two facts the exercise is about, by autograd: alpha_i does not depend on y_{i-1} (the query is
    s_{i-1}), and s_i depends on the encoder states only through c_i (ds_i/dh = 0 when W_c = 0)."""
    args = [t.requires_grad_() for t in decoder_inputs(2, 5, 4, 3, 6, 7, torch.Generator().manual_seed(9),
                                                       torch.float64)]
    s, _, alpha = ref.bahdanau_decoder_step(*args)
    (grad_y,) = torch.autograd.grad(alpha.sum() + (alpha ** 2).sum(), args[1], allow_unused=True)
    assert grad_y is None
    (grad_h,) = torch.autograd.grad(s.sum(), args[2])
    assert grad_h.norm() > 1e-3
    no_context = [t.detach() for t in args]
    no_context[8] = torch.zeros_like(no_context[8]).requires_grad_()
    no_context[2].requires_grad_()
    s0, _, _ = ref.bahdanau_decoder_step(*no_context)
    (grad_h0,) = torch.autograd.grad(s0.sum(), no_context[2], allow_unused=True)
    assert grad_h0 is None or grad_h0.abs().max() == 0


def test_decoder_step_passes_gradcheck_in_float64_with_a_mask():
    gen = torch.Generator().manual_seed(10)
    args = [t.requires_grad_() for t in decoder_inputs(2, 4, 3, 2, 3, 4, gen, torch.float64)]
    mask = torch.tensor([[True, True, True, False], [True, False, False, False]])
    assert torch.autograd.gradcheck(lambda *a: ref.bahdanau_decoder_step(*a, mask), args)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_decoder_step_keeps_the_dtype_and_ignores_padded_states(dtype):
    gen = torch.Generator().manual_seed(11)
    args = list(decoder_inputs(3, 6, 4, 3, 5, 4, gen, dtype))
    mask = torch.arange(6) < torch.tensor([6, 3, 1])[:, None]
    out = ref.bahdanau_decoder_step(*args, mask)
    assert all(t.dtype == dtype for t in out)
    args[2] = args[2].masked_fill(~mask[..., None], 1e3)
    for a, b in zip(out, ref.bahdanau_decoder_step(*args, mask)):
        torch.testing.assert_close(a, b)
    assert bool((out[2][~mask] == 0).all())


def test_decoder_step_leaves_inputs_unchanged_and_rejects_weights_that_do_not_fit():
    args = decoder_inputs(2, 5, 4, 3, 6, 7, torch.Generator().manual_seed(12))
    before = [t.clone() for t in args]
    ref.bahdanau_decoder_step(*args)
    assert all(torch.equal(a, b) for a, b in zip(args, before))
    bad = list(args)
    bad[4] = args[4].T.contiguous()  # U_a (a, d_h)
    with pytest.raises(ValueError):
        ref.bahdanau_decoder_step(*bad)


def test_decoder_judge_accepts_the_reference_and_names_each_slip():
    cases = cases_mod.bahdanau_decoder_step_cases(seed=3)
    cases = [c for c in cases if c.raises is None]
    cases_mod.decoder_step_follows_the_paper(cases, outputs_of(cases, ref.bahdanau_decoder_step))

    def luong_query(s_prev, y_prev, h, W_a, U_a, v_a, W_y, W_s, W_c, b, mask=None):
        s_new = torch.tanh(y_prev @ W_y + s_prev @ W_s + b)
        return ref.bahdanau_decoder_step(s_new, y_prev, h, W_a, U_a, v_a, W_y, W_s, W_c, b, mask)

    def no_context(s_prev, y_prev, h, W_a, U_a, v_a, W_y, W_s, W_c, b, mask=None):
        return ref.bahdanau_decoder_step(s_prev, y_prev, h, W_a, U_a, v_a, W_y, W_s, 0 * W_c, b, mask)

    def unmasked(s_prev, y_prev, h, W_a, U_a, v_a, W_y, W_s, W_c, b, mask=None):
        return ref.bahdanau_decoder_step(s_prev, y_prev, h, W_a, U_a, v_a, W_y, W_s, W_c, b)

    for wrong, message in ((luong_query, "the query is the previous state"), (no_context, "the context enters"),
                           (unmasked, "masked position")):
        with pytest.raises(AssertionError, match=message):
            cases_mod.decoder_step_follows_the_paper(cases, outputs_of(cases, wrong))


def test_decoder_cases_cover_the_layouts_masks_and_lengths_of_the_contract():
    cases = cases_mod.bahdanau_decoder_step_cases(seed=0)
    encs = [c.args[2] for c in cases]
    assert any(not e.is_contiguous() and e.detach().clone().stride() == e.stride() for e in encs), \
        "a non-contiguous layout the checks' clone keeps"
    assert max(e.shape[1] for e in encs) >= 500 and any(e.shape[0] == e.shape[1] for e in encs)
    masks = [c.args[10] if len(c.args) > 10 else c.kwargs.get("mask") for c in cases]
    assert {m.dim() for m in masks if m is not None} == {1, 2} and any("mask" in c.kwargs for c in cases)
    assert any(c.raises for c in cases)
    for dtype in ("float16", "bfloat16", "float64"):
        cases = cases_mod.bahdanau_decoder_step_cases(0, dtype=dtype)
        assert all(c.args[0].dtype == getattr(torch, dtype) for c in cases)


def test_extreme_cases_put_pre_activations_past_40():
    x, W_xh, W_hh, b_h, *_ = next(c.args for c in cases_mod.rnn_forward_cases(0) if "past 40" in c.label)
    assert (x @ W_xh + b_h).abs().max() > 40
    q, k, W_q, W_k, _ = next(c.args for c in cases_mod.additive_scores_cases(0) if "past 40" in c.label)
    assert ((q @ W_q)[:, None] + k @ W_k).abs().max() > 40
    s, y, _, _, _, _, W_y, W_s, _, b = next(c.args for c in cases_mod.bahdanau_decoder_step_cases(0)
                                           if "past 40" in c.label)[:10]
    assert (y @ W_y + s @ W_s + b).abs().max() > 40


# ---------------------------------------------------------------------------------------------------
# case generators, the nn.RNN reference and the judge


GENERATORS = [(name, params) for name in ("rnn_forward_cases", "additive_scores_cases", "attention_pool_cases",
                                          "bahdanau_decoder_step_cases")
              for params in ({}, {"gradients": True}, {"dtype": "float16"}, {"dtype": "bfloat16"},
                             {"dtype": "float64"})]


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_case_generators_are_deterministic_labelled_and_non_empty(seed):
    for name, params in GENERATORS:
        assert_generator_is_deterministic_and_labelled(getattr(cases_mod, name), seed, params)


def test_rnn_cases_are_non_square_and_cover_h0_dtype_and_batch_equal_time():
    cases = cases_mod.rnn_forward_cases(seed=0)
    shapes = [(c.args[0].shape, c.args[1].shape) for c in cases]  # x (B, T, d_in), W_xh (d_in, H)
    assert all(len(x) == 3 for x, _ in shapes)
    assert sum(W[0] != W[1] for _, W in shapes) >= len(cases) - 2, "d_in != H almost everywhere"
    assert any(x[0] == x[1] for x, _ in shapes) and sum(x[0] != x[1] for x, _ in shapes) >= len(cases) - 2
    assert any(len(c.args) == 5 for c in cases) and any("h0" in c.kwargs for c in cases)
    assert any(len(c.args) == 4 and not c.kwargs for c in cases)
    assert any(c.args[0].dtype == torch.float64 and len(c.args) == 4 and not c.kwargs for c in cases)
    assert any(c.args[0].shape[1] == 1 for c in cases) and max(c.args[0].shape[1] for c in cases) >= 500
    assert not any(torch.allclose(c.args[2], c.args[2].T) for c in cases), "W_hh must not be symmetric"
    grads = cases_mod.rnn_forward_cases(seed=0, gradients=True)
    assert all(c.grad_output is not None and c.args[0].dtype == torch.float64 for c in grads)


def test_additive_and_pooling_cases_cover_the_shapes_mistakes_hide_in():
    add = cases_mod.additive_scores_cases(seed=0)
    dims = [(c.args[1].shape[0], c.args[1].shape[1], c.args[2].shape[0], c.args[3].shape[0], c.args[4].shape[0])
            for c in add]  # (B, T, d_q, d_k, a)
    assert any(B == T and B > 1 for B, T, *_ in dims) and any(B == 1 for B, *_ in dims)
    assert any(d_q == d_k == a for _, _, d_q, d_k, a in dims)
    assert any(len({d_q, d_k, a}) == 3 for _, _, d_q, d_k, a in dims)
    pool = cases_mod.attention_pool_cases(seed=0)
    masks = [c.args[2] for c in pool if len(c.args) > 2]
    assert masks and all(m.dtype == torch.bool and m.any(-1).all() for m in masks)
    assert {m.dim() for m in masks} == {1, 2} and any(m.shape[0] == 1 and m.dim() == 2 for m in masks)
    assert any(not m.all() for m in masks) and any(m.all() for m in masks)
    garbage = [c for c in pool if len(c.args) > 2 and (c.args[0].masked_select(~c.args[2]) > 100).any()]
    assert garbage, "a case must put large scores at masked positions"
    assert any(c.args[0].abs().max() > 200 and len(c.args) == 2 for c in pool)


def test_torch_rnn_reference_equals_nn_rnn_with_copied_weights_and_keeps_the_rng():
    for c in (c for c in cases_mod.rnn_forward_cases(seed=3) if c.raises is None):
        x, W_xh, W_hh, b_h = c.args[:4]
        h0 = c.args[4] if len(c.args) > 4 else c.kwargs.get("h0")
        state = torch.random.get_rng_state()
        outputs, h_T = cases_mod.torch_rnn_forward(x, W_xh, W_hh, b_h, h0)
        assert torch.equal(torch.random.get_rng_state(), state), "the reference must not draw random numbers"
        with torch.no_grad():
            expected, h_n = copied_nn_rnn(W_xh, W_hh, b_h)(x, None if h0 is None else h0[None])
        torch.testing.assert_close(outputs, expected)
        torch.testing.assert_close(h_T, h_n[0])


def test_torch_rnn_reference_propagates_gradients_to_our_weights():
    c = cases_mod.rnn_forward_cases(seed=4, gradients=True)[0]
    a = [t.clone().requires_grad_() for t in c.args]
    b = [t.clone().requires_grad_() for t in c.args]
    cases_mod.torch_rnn_forward(*a)[0].backward(c.grad_output)
    ref.rnn_forward(*b)[0].backward(c.grad_output)
    for x, y in zip(a, b):
        torch.testing.assert_close(x.grad, y.grad)


def outputs_of(cases: list[Case], obj) -> list:
    return [from_plain(o.output) for o in evaluate(obj, cases)]


def test_pooling_judge_accepts_the_reference_and_names_the_bug_of_others():
    cases = [c for c in cases_mod.attention_pool_cases(seed=3) if c.raises is None]
    cases_mod.pooling_weights_are_distributions(cases, outputs_of(cases, ref.attention_pool))

    def over_batch(scores, values, mask=None):
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        w = torch.softmax(scores, dim=0)
        return (w.unsqueeze(1) @ values).squeeze(1), w

    def mask_after(scores, values, mask=None):
        context, w = ref.attention_pool(scores, values)
        return context, w if mask is None else w * mask

    def stale_context(scores, values, mask=None):
        _, w = ref.attention_pool(scores, values, mask)
        return ref.attention_pool(scores, values)[0], w

    with pytest.raises(AssertionError, match="(sum to 1|NaN)"):
        cases_mod.pooling_weights_are_distributions(cases, outputs_of(cases, over_batch))
    with pytest.raises(AssertionError, match="sum to 1"):
        cases_mod.pooling_weights_are_distributions(cases, outputs_of(cases, mask_after))
    with pytest.raises(AssertionError, match="weighted average"):
        cases_mod.pooling_weights_are_distributions(cases, outputs_of(cases, stale_context))


# ---------------------------------------------------------------------------------------------------
# the notebook's hidden checks


def test_rnn_forward_is_checked_against_nn_rnn_and_the_reference_and_bans_the_builtin():
    checks = parse_checks(hidden_blocks()["test_rnn_forward"])
    references = {c.reference for c in checks}
    assert references == {"solutions.cases.rnn_bottleneck:torch_rnn_forward", "solutions.rnn_bottleneck:rnn_forward"}
    assert any(dict(c.params).get("gradients") for c in checks)
    assert all({"torch.rnn_tanh", "torch.rnn_tanh_cell"} <= set(c.banned) for c in checks)


def test_hidden_checks_fail_a_wrong_answer_with_a_message_naming_the_case():
    check = parse_checks(hidden_blocks()["test_rnn_forward"])[0]

    def forgets_h0(x, W_xh, W_hh, b_h, h0=None):
        return ref.rnn_forward(x, W_xh, W_hh, b_h)

    with pytest.raises(CheckFailed, match=r"is wrong on case '.+h0"):
        run_local(check, forgets_h0)


@pytest.mark.parametrize("exercise", ["rnn_forward", "additive_scores", "attention_pool", "bahdanau_decoder_step"])
def test_every_exercise_is_checked_in_the_four_floating_dtypes_and_with_gradients(exercise):
    checks = parse_checks(hidden_blocks()[f"test_{exercise}"])
    dtypes = {dict(c.params).get("dtype") for c in checks if c.kind == "close" and not dict(c.params).get("gradients")}
    assert dtypes == {"float16", "bfloat16", "float32", "float64"}
    assert any(dict(c.params).get("gradients") for c in checks)


def test_the_decoder_step_is_judged_against_the_papers_loop():
    checks = parse_checks(hidden_blocks()["test_bahdanau_decoder_step"])
    assert any(c.judge == "solutions.cases.rnn_bottleneck:decoder_step_follows_the_paper" for c in checks)
    check = next(c for c in checks if c.kind == "property")

    def context_not_in_cell(s_prev, y_prev, h, W_a, U_a, v_a, W_y, W_s, W_c, b, mask=None):
        _, c, alpha = ref.bahdanau_decoder_step(s_prev, y_prev, h, W_a, U_a, v_a, W_y, W_s, W_c, b, mask)
        return torch.tanh(y_prev @ W_y + s_prev @ W_s + b), c, alpha

    with pytest.raises(CheckFailed, match="the context enters the cell"):
        run_local(check, context_not_in_cell)
