"""Hidden-test cases, a built-in reference and property judges for chapter 1 (the RNN bottleneck).

Generators ``<name>_cases(seed, **params) -> list[Case]`` draw every tensor from a
``torch.Generator`` seeded with ``seed``; their labels are shown to a student whose code fails a case.
Shapes are chosen so that mistakes cannot pass by accident: ``d_in != H``, ``B != T`` (and one case
with ``B == T``, where batch/time confusion runs without a shape error), non-square attention matrices
(and one square case, where swapped or transposed matrices run silently), float64 cases, and masked
positions whose scores are garbage.

:func:`torch_rnn_forward` is ``rnn_forward`` computed by ``torch.nn.RNN``, so that a hidden check can
prove equality with PyTorch's own RNN, not only with this course's reference.
Judges ``judge(cases, outputs) -> None`` raise ``AssertionError`` with a message for the student.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.func import functional_call

from grader.checks import Case
from solutions.cases._common import assert_weight_rows

#: Tolerances of the property judges (float32 results).
ATOL, RTOL = 1e-5, 1e-4


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


# ---------------------------------------------------------------------------------------------------
# rnn_forward


def torch_rnn_forward(
    x: torch.Tensor,
    W_xh: torch.Tensor,
    W_hh: torch.Tensor,
    b_h: torch.Tensor,
    h0: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``rnn_forward`` computed by ``nn.RNN(d_in, H, nonlinearity="tanh", batch_first=True)``.

    ``nn.RNN`` computes ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` with weights stored as
    ``(out_features, in_features)``, so our matrices go in transposed: ``weight_ih_l0 = W_xh.T``,
    ``weight_hh_l0 = W_hh.T``, ``bias_ih_l0 = b_h`` and ``bias_hh_l0 = 0`` (we have one bias, it has two).
    It takes and returns the state with a leading layer axis, ``(num_layers=1, B, H)``, where our API
    uses ``(B, H)``. The weights are substituted with ``torch.func.functional_call`` rather than copied,
    which computes the same and keeps autograd connected to our tensors (for gradient cases).
    """
    d_in, H = W_xh.shape
    with torch.random.fork_rng(devices=[]):  # its random initial weights are replaced: leave the RNG as it was
        rnn = nn.RNN(d_in, H, num_layers=1, nonlinearity="tanh", bias=True, batch_first=True, dtype=x.dtype)
    params = {"weight_ih_l0": W_xh.T, "weight_hh_l0": W_hh.T, "bias_ih_l0": b_h,
              "bias_hh_l0": torch.zeros_like(b_h)}
    state = None if h0 is None else h0.unsqueeze(0)  # (B, H) -> (1, B, H)
    outputs, h_n = functional_call(rnn, params, (x, state))  # (B, T, H), (1, B, H)
    return outputs, h_n[0]


def rnn_forward_cases(seed: int, gradients: bool = False) -> list[Case]:
    """Forward cases (compared with ``nn.RNN``), or (``gradients=True``) float64 gradient cases."""
    g = torch.Generator().manual_seed(seed)

    def case(B: int, T: int, d_in: int, H: int, label: str, h0: str = "", dtype: torch.dtype = torch.float32,
             w_scale: float = 1.0) -> Case:
        x = _randn(g, B, T, d_in, dtype=dtype)
        W_xh = _randn(g, d_in, H, scale=w_scale / d_in ** 0.5, dtype=dtype)
        W_hh = _randn(g, H, H, scale=0.9 * w_scale / H ** 0.5, dtype=dtype)
        b_h = _randn(g, H, scale=0.5, dtype=dtype)
        args, kwargs = (x, W_xh, W_hh, b_h), {}
        if h0:
            state = torch.tanh(_randn(g, B, H, dtype=dtype))  # a state an RNN could have reached
            if h0 == "keyword":
                kwargs = {"h0": state}
            else:
                args = (*args, state)
        grad_output = _randn(g, B, T, H, dtype=dtype) if gradients else None
        return Case(args=args, kwargs=kwargs, label=label, grad_output=grad_output)

    f64 = torch.float64
    if gradients:
        return [
            case(2, 4, 3, 5, "gradients, float64: B=2, T=4, d_in=3, H=5, h0 given", h0="positional", dtype=f64),
            case(3, 6, 5, 2, "gradients, float64: B=3, T=6, d_in=5, H=2, no h0", dtype=f64),
            case(1, 1, 2, 3, "gradients, float64: B=1, T=1, d_in=2, H=3, h0 as keyword", h0="keyword", dtype=f64),
            case(2, 9, 4, 6, "gradients, float64: B=2, T=9, d_in=4, H=6, h0 given, large weights",
                 h0="positional", dtype=f64, w_scale=2.0),
        ]
    return [
        case(2, 5, 3, 4, "B=2, T=5, d_in=3, H=4, no h0 (the state starts at zeros)"),
        case(3, 4, 5, 2, "B=3, T=4, d_in=5, H=2, h0 given as the fifth argument", h0="positional"),
        case(4, 6, 4, 4, "B=4, T=6, d_in=H=4, h0 given as keyword h0=...", h0="keyword"),
        case(1, 1, 2, 3, "a single sequence of a single step: B=1, T=1, d_in=2, H=3, h0 given", h0="positional"),
        case(5, 5, 3, 6, "B=T=5 (batch and time axes have the same length), d_in=3, H=6, h0 given",
             h0="keyword"),
        case(3, 7, 6, 5, "float64: B=3, T=7, d_in=6, H=5, h0 given", h0="positional", dtype=f64),
        case(2, 3, 4, 3, "float64 without h0: the zero state must have x's dtype", dtype=f64),
        case(2, 8, 3, 5, "large weights (tanh saturates): B=2, T=8, d_in=3, H=5, h0 given", h0="keyword",
             w_scale=3.0),
        case(2, 30, 3, 7, "a long sequence: B=2, T=30, d_in=3, H=7, no h0"),
    ]


# ---------------------------------------------------------------------------------------------------
# additive_scores


def additive_scores_cases(seed: int, gradients: bool = False) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def case(B: int, T: int, d_q: int, d_k: int, a: int, label: str, dtype: torch.dtype = torch.float32,
             scale: float = 1.0) -> Case:
        query = _randn(g, B, d_q, scale=scale, dtype=dtype)
        keys = _randn(g, B, T, d_k, scale=scale, dtype=dtype)
        W_q = _randn(g, d_q, a, scale=d_q ** -0.5, dtype=dtype)
        W_k = _randn(g, d_k, a, scale=d_k ** -0.5, dtype=dtype)
        v = _randn(g, a, dtype=dtype)
        grad_output = _randn(g, B, T, dtype=dtype) if gradients else None
        return Case(args=(query, keys, W_q, W_k, v), label=label, grad_output=grad_output)

    f64 = torch.float64
    if gradients:
        return [
            case(2, 5, 3, 4, 6, "gradients, float64: B=2, T=5, d_q=3, d_k=4, a=6", dtype=f64),
            case(3, 3, 4, 4, 4, "gradients, float64: B=T=3, d_q=d_k=a=4", dtype=f64),
        ]
    return [
        case(2, 5, 3, 4, 6, "B=2, T=5, d_q=3, d_k=4, a=6"),
        case(4, 4, 5, 2, 3, "B=T=4 (the query must be broadcast over the keys' T axis), d_q=5, d_k=2, a=3"),
        case(3, 6, 4, 4, 4, "square matrices: B=3, T=6, d_q=d_k=a=4 (W_q and W_k must not be swapped)"),
        case(1, 1, 2, 3, 5, "a single key: B=1, T=1, d_q=2, d_k=3, a=5"),
        case(3, 7, 6, 5, 8, "float64: B=3, T=7, d_q=6, d_k=5, a=8", dtype=f64),
        case(2, 6, 3, 5, 2, "inputs of size ~5 (tanh saturates): B=2, T=6, d_q=3, d_k=5, a=2", scale=5.0),
        case(5, 2, 7, 3, 4, "B=5, T=2, d_q=7, d_k=3, a=4"),
    ]


# ---------------------------------------------------------------------------------------------------
# attention_pool


def _random_mask(g: torch.Generator, B: int, T: int) -> torch.Tensor:
    """``(B, T)`` bool, True = may attend; every row keeps one True, and one row keeps exactly one."""
    mask = torch.rand(B, T, generator=g) < 0.6
    keep = torch.randint(T, (B,), generator=g)
    mask[torch.arange(B), keep] = True
    mask[-1] = False
    mask[-1, keep[-1]] = True
    return mask


def _padding_mask(g: torch.Generator, B: int, T: int) -> torch.Tensor:
    """``mask[b, t] = t < length[b]`` with lengths in ``1..T``, one full row and one padded row."""
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0], lengths[-1] = T, min(int(lengths[-1]), T - 1)
    return torch.arange(T)[None, :] < lengths[:, None]


def attention_pool_cases(seed: int, gradients: bool = False) -> list[Case]:
    g = torch.Generator().manual_seed(seed)

    def case(B: int, T: int, d_v: int, label: str, mask: torch.Tensor | None = None, scale: float = 1.0,
             dtype: torch.dtype = torch.float32, garbage: float = 0.0) -> Case:
        scores = _randn(g, B, T, scale=scale, dtype=dtype)
        values = _randn(g, B, T, d_v, dtype=dtype)
        if mask is not None and garbage:
            # what padding often holds: scores far larger than the real ones, which must not matter
            scores = torch.where(mask, scores, garbage * (1 + torch.rand(B, T, generator=g)).to(dtype))
        args = (scores, values) if mask is None else (scores, values, mask)
        grad_output = _randn(g, B, d_v, dtype=dtype) if gradients else None
        return Case(args=args, label=label, grad_output=grad_output)

    f64 = torch.float64
    if gradients:
        return [
            case(3, 5, 4, "gradients, float64: B=3, T=5, d_v=4, no mask", dtype=f64),
            case(2, 6, 3, "gradients, float64: B=2, T=6, d_v=3, with a mask", mask=_random_mask(g, 2, 6),
                 dtype=f64),
        ]
    return [
        case(2, 5, 3, "B=2, T=5, d_v=3, no mask"),
        case(3, 6, 4, "B=3, T=6, d_v=4, random mask (True = may attend)", mask=_random_mask(g, 3, 6)),
        case(4, 7, 2, "padding mask: B=4, T=7, d_v=2, scores of the padded positions are garbage up to 2e3",
             mask=_padding_mask(g, 4, 7), garbage=1e3),
        case(5, 5, 3, "B=T=5 (batch and position axes have the same length), random mask",
             mask=_random_mask(g, 5, 5)),
        case(1, 1, 3, "a single position: B=1, T=1, d_v=3, mask all True", mask=torch.ones(1, 1, dtype=torch.bool)),
        case(3, 4, 5, "large scores (around +-500: exp overflows unless you subtract the max), no mask",
             scale=500.0),
        case(3, 4, 6, "float64: B=3, T=4, d_v=6, padding mask", mask=_padding_mask(g, 3, 4), dtype=f64),
        case(2, 8, 4, "B=2, T=8, d_v=4, mask with every position allowed", mask=torch.ones(2, 8, dtype=torch.bool)),
    ]


def pooling_weights_are_distributions(cases: list[Case], outputs: list) -> None:
    """``weights`` ``(B, T)``: distributions over positions, exactly 0 where masked, and
    ``context = sum_t weights[:, t] * values[:, t]``."""
    for case, output in zip(cases, outputs):
        scores, values = case.args[0], case.args[1]
        mask = case.args[2] if len(case.args) > 2 else None
        where = f"case '{case.label}'"
        assert isinstance(output, tuple) and len(output) == 2, f"{where}: should return a pair (context, weights)"
        context, weights = output
        assert isinstance(weights, torch.Tensor) and isinstance(context, torch.Tensor), \
            f"{where}: context and weights should be tensors"
        assert tuple(weights.shape) == tuple(scores.shape), \
            f"{where}: weights have shape {tuple(weights.shape)}, expected (B, T) = {tuple(scores.shape)}"
        expected = (*scores.shape[:-1], values.shape[-1])
        assert tuple(context.shape) == expected, \
            f"{where}: context has shape {tuple(context.shape)}, expected (B, d_v) = {expected}"
        assert_weight_rows(where, weights, mask,
                           "the weights of each sequence must sum to 1 over its positions (the last axis)")
        pooled = torch.einsum("...t,...td->...d", weights.double(), values.double())
        assert torch.allclose(context.double(), pooled, atol=ATOL, rtol=RTOL), (
            f"{where}: context must be the weighted average of the values with the returned weights, "
            f"sum_t weights[:, t] * values[:, t]; the largest difference is "
            f"{float((context.double() - pooled).abs().max()):.3g}")
