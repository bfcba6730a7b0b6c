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

Every generator takes ``dtype`` (a name of :data:`solutions.cases.families.DTYPES`): the float32 set holds
every case, the others the cases that matter in that dtype (labels tagged with it), checked one
``check_close`` per dtype with that dtype's tolerances. The statements' clauses map to the labels in
:data:`CONTRACT` at the end of this module. :func:`decoder_step_follows_the_paper` judges
``bahdanau_decoder_step`` against a loop written from Bahdanau et al.'s equations (eqs. 4-6), in float64.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn
from torch.func import functional_call

from grader.checks import Case
from solutions.cases._common import assert_weight_rows
from solutions.cases.families import DTYPES, LONG_LENGTHS, fill_masked, tag

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


def _strided(x: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous view: stored with the first two axes swapped (time-major, like
    ``nn.RNN``'s default layout), seen batch first (the checks and the wire keep any layout:
    :func:`grader.checks.clone_layout`)."""
    return x.transpose(0, 1).contiguous().transpose(0, 1)


def _transposed_view(W: torch.Tensor) -> torch.Tensor:
    """A matrix with the same values stored transposed: ``W.T.contiguous().T`` is a non-contiguous view."""
    return W.T.contiguous().T


def rnn_forward_cases(seed: int, gradients: bool = False, dtype: str = "float32") -> list[Case]:
    """Forward cases (compared with ``nn.RNN`` in float32 and float64, with the reference in half
    precisions), or (``gradients=True``) float64 gradient cases."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]

    def case(B: int, T: int, d_in: int, H: int, label: str, h0: str = "", dtype: torch.dtype = dt,
             w_scale: float = 1.0, x_scale: float = 1.0, layout: str = "", raises: str | None = None) -> Case:
        x = _randn(g, B, T, d_in, scale=x_scale, dtype=dtype)
        W_xh = _randn(g, d_in, H, scale=w_scale / d_in ** 0.5, dtype=dtype)
        W_hh = _randn(g, H, H, scale=0.9 * w_scale / H ** 0.5, dtype=dtype)
        b_h = _randn(g, H, scale=0.5, dtype=dtype)
        if layout == "strided":
            x, W_hh = _strided(x), _transposed_view(W_hh)
        elif layout == "expanded":  # one sequence for the whole batch, one bias row: stride 0 (no .view, no writes)
            x, b_h = x[:1].expand_as(x), b_h[:1].expand_as(b_h)
        elif layout == "W_xh transposed":
            W_xh = W_xh.T.contiguous()
        args, kwargs = (x, W_xh, W_hh, b_h), {}
        if h0:
            state = torch.tanh(_randn(g, B, H, dtype=torch.float64)).to(dtype)  # a state an RNN could reach
            if h0 == "keyword":
                kwargs = {"h0": state}
            else:
                args = (*args, state)
        grad_output = _randn(g, B, T, H, dtype=dtype) if gradients else None
        return Case(args=args, kwargs=kwargs, label=tag(label, dt), grad_output=grad_output, raises=raises)

    f64 = torch.float64
    if gradients:
        return [
            case(2, 4, 3, 5, "gradients, float64: B=2, T=4, d_in=3, H=5, h0 given", h0="positional", dtype=f64),
            case(3, 6, 5, 2, "gradients, float64: B=3, T=6, d_in=5, H=2, no h0", dtype=f64),
            case(1, 1, 2, 3, "gradients, float64: B=1, T=1, d_in=2, H=3, h0 as keyword", h0="keyword", dtype=f64),
            case(2, 9, 4, 6, "gradients, float64: B=2, T=9, d_in=4, H=6, h0 given, large weights",
                 h0="positional", dtype=f64, w_scale=2.0),
        ]
    if dtype != "float32":  # the dtype promise: outputs in x's dtype, without h0 too
        return [
            case(2, 5, 3, 4, "B=2, T=5, d_in=3, H=4, no h0 (the zero state must have x's dtype)"),
            case(3, 6, 5, 2, "B=3, T=6, d_in=5, H=2, h0 given", h0="positional"),
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
        case(2, 6, 3, 5, "pre-activations past 40 (x of size ~60): an exp-based tanh overflows to inf/inf",
             h0="positional", x_scale=60.0),
        case(2, LONG_LENGTHS[1], 3, 4, f"a long sequence: B=2, T={LONG_LENGTHS[1]}, d_in=3, H=4, no h0"),
        case(3, 5, 4, 6, "non-contiguous x (stored time-major) and W_hh (a transposed view)", h0="positional",
             layout="strided"),
        case(3, 4, 3, 5, "expanded x (one sequence for the batch, stride 0) and b_h (one value, stride 0)",
             layout="expanded"),
        case(2, 5, 3, 4, "W_xh of shape (H, d_in) = (4, 3) does not fit x: an error, not a silent transpose",
             layout="W_xh transposed", raises="Exception"),
    ]


# ---------------------------------------------------------------------------------------------------
# additive_scores


def additive_scores_cases(seed: int, gradients: bool = False, dtype: str = "float32") -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]

    def case(B: int, T: int, d_q: int, d_k: int, a: int, label: str, dtype: torch.dtype = dt,
             scale: float = 1.0, layout: str = "", raises: str | None = None) -> Case:
        query = _randn(g, B, d_q, scale=scale, dtype=dtype)
        keys = _randn(g, B, T, d_k, scale=scale, dtype=dtype)
        W_q = _randn(g, d_q, a, scale=d_q ** -0.5, dtype=dtype)
        W_k = _randn(g, d_k, a, scale=d_k ** -0.5, dtype=dtype)
        v = _randn(g, a, dtype=dtype)
        if layout == "strided":
            keys, query, W_k = _strided(keys), _strided(query), _transposed_view(W_k)
        elif layout == "expanded":  # one set of keys and one query for the whole batch: stride 0
            keys, query = keys[:1].expand_as(keys), query[:1].expand_as(query)
        elif layout == "W_k transposed":
            W_k = W_k.T.contiguous()
        grad_output = _randn(g, B, T, dtype=dtype) if gradients else None
        return Case(args=(query, keys, W_q, W_k, v), label=tag(label, dt), grad_output=grad_output,
                    raises=raises)

    f64 = torch.float64
    if gradients:
        return [
            case(2, 5, 3, 4, 6, "gradients, float64: B=2, T=5, d_q=3, d_k=4, a=6", dtype=f64),
            case(3, 3, 4, 4, 4, "gradients, float64: B=T=3, d_q=d_k=a=4", dtype=f64),
        ]
    if dtype != "float32":
        return [
            case(2, 5, 3, 4, 6, "B=2, T=5, d_q=3, d_k=4, a=6"),
            case(4, 4, 5, 2, 3, "B=T=4, d_q=5, d_k=2, a=3"),
        ]
    return [
        case(2, 5, 3, 4, 6, "B=2, T=5, d_q=3, d_k=4, a=6"),
        case(4, 4, 5, 2, 3, "B=T=4 (the query must be broadcast over the keys' T axis), d_q=5, d_k=2, a=3"),
        case(3, 6, 4, 4, 4, "square matrices: B=3, T=6, d_q=d_k=a=4 (W_q and W_k must not be swapped)"),
        case(1, 1, 2, 3, 5, "a single key: B=1, T=1, d_q=2, d_k=3, a=5"),
        case(3, 7, 6, 5, 8, "float64: B=3, T=7, d_q=6, d_k=5, a=8", dtype=f64),
        case(2, 6, 3, 5, 2, "inputs of size ~5 (tanh saturates): B=2, T=6, d_q=3, d_k=5, a=2", scale=5.0),
        case(5, 2, 7, 3, 4, "B=5, T=2, d_q=7, d_k=3, a=4"),
        case(2, 6, 3, 5, 4, "pre-activations past 40 (inputs of size ~80): an exp-based tanh overflows to inf/inf",
             scale=80.0),
        case(2, LONG_LENGTHS[2], 3, 4, 5, f"a long sequence of keys: B=2, T={LONG_LENGTHS[2]}, d_q=3, d_k=4, a=5"),
        case(3, 5, 4, 6, 3, "non-contiguous query, keys (stored time-major) and W_k (transposed views)",
             layout="strided"),
        case(3, 5, 4, 6, 3, "expanded query and keys (one of each for the batch, stride 0)", layout="expanded"),
        case(2, 5, 3, 4, 6, "W_k of shape (a, d_k) = (6, 4) does not fit the keys: an error, not a silent transpose",
             layout="W_k transposed", raises="Exception"),
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


def _key_mask(g: torch.Generator, *shape: int) -> torch.Tensor:
    """A bool mask of ``shape`` (``(T,)`` or ``(1, T)``) with at least one True."""
    mask = torch.rand(*shape, generator=g) < 0.6
    mask[..., 0] = True
    return mask


def attention_pool_cases(seed: int, gradients: bool = False, dtype: str = "float32") -> list[Case]:
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]

    def case(B: int, T: int, d_v: int, label: str, mask: torch.Tensor | None = None, scale: float = 1.0,
             dtype: torch.dtype = dt, garbage: float = 0.0, layout: str = "", raises: str | None = None,
             shift: float = 0.0) -> Case:
        scores = _randn(g, B, T, scale=scale, dtype=dtype) + shift
        values = _randn(g, B, T, d_v, dtype=dtype)
        if mask is not None and garbage:
            # what padding often holds: scores far larger than the real ones, which must not matter
            if abs(garbage) == float("inf"):
                scores = fill_masked(scores, mask, garbage)
            else:
                scores = torch.where(mask, scores, garbage * (1 + torch.rand(B, T, generator=g)).to(dtype))
        if layout == "strided":
            scores, values = _strided(scores), _strided(values)
        elif layout == "values of another T":
            values = _randn(g, B, T + 1, d_v, dtype=dtype)
        args = (scores, values) if mask is None else (scores, values, mask)
        grad_output = _randn(g, B, d_v, dtype=dtype) if gradients else None
        return Case(args=args, label=tag(label, dt), grad_output=grad_output, raises=raises)

    f64 = torch.float64
    if gradients:
        return [
            case(3, 5, 4, "gradients, float64: B=3, T=5, d_v=4, no mask", dtype=f64),
            case(2, 6, 3, "gradients, float64: B=2, T=6, d_v=3, with a mask", mask=_random_mask(g, 2, 6),
                 dtype=f64),
        ]
    if dtype != "float32":
        return [
            case(2, 5, 3, "B=2, T=5, d_v=3, no mask"),
            case(4, 7, 2, "padding mask: B=4, T=7, d_v=2, scores of the padded positions are garbage up to 2e3",
                 mask=_padding_mask(g, 4, 7), garbage=1e3),
            case(3, 6, 4, "random mask, B=3, T=6, d_v=4", mask=_random_mask(g, 3, 6)),
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
        case(3, 6, 2, "+inf scores at the masked positions (any value may stand there)",
             mask=_padding_mask(g, 3, 6), garbage=float("inf")),
        case(4, 5, 3, "a 1-D mask (T,) shared by the batch", mask=_key_mask(g, 5)),
        case(3, 7, 2, "a mask (1, T) broadcast over the batch", mask=_key_mask(g, 1, 7)),
        case(2, LONG_LENGTHS[2], 3, f"a long sequence: B=2, T={LONG_LENGTHS[2]}, padding mask",
             mask=_padding_mask(g, 2, LONG_LENGTHS[2])),
        case(3, 6, 4, "non-contiguous scores and values (stored time-major), padding mask",
             mask=_padding_mask(g, 3, 6), layout="strided"),
        case(2, 5, 3, "values with T+1 positions for scores with T: an error", layout="values of another T",
             raises="Exception"),
        case(3, 6, 2, "NaN scores at the masked positions (any value may stand there)",
             mask=_padding_mask(g, 3, 6), garbage=float("nan")),
        case(3, 6, 2, "-inf scores at the masked positions", mask=_padding_mask(g, 3, 6), garbage=float("-inf")),
        case(3, 6, 3, "every allowed score around -3e4, far below -1e4: a finite fill such as -1e4 outweighs them",
             mask=_padding_mask(g, 3, 6), scale=5.0, shift=-3e4),
        _garbage_values(case(3, 6, 4, "values at the masked positions hold any finite value (1e30 here)",
                             mask=_padding_mask(g, 3, 6)), 1e30),
    ]


def _garbage_values(case: Case, value: float) -> Case:
    """The case with ``value`` in place of the values at its masked positions (finite: they get weight 0)."""
    scores, values, mask = case.args
    values = torch.where(mask.expand_as(scores)[..., None], values, torch.full_like(values, value))
    return dataclasses.replace(case, args=(scores, values, mask))


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


# ---------------------------------------------------------------------------------------------------
# bahdanau_decoder_step


def bahdanau_decoder_step_cases(seed: int, gradients: bool = False, dtype: str = "float32") -> list[Case]:
    """Cases ``(s_prev, y_prev, encoder_states, W_a, U_a, v_a, W_y, W_s, W_c, b[, mask])``."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[dtype]

    def case(B: int, T: int, H: int, d_y: int, d_h: int, a: int, label: str, mask: torch.Tensor | None = None,
             dtype: torch.dtype = dt, scale: float = 1.0, garbage: float = 0.0, layout: str = "",
             mask_as: str = "positional", raises: str | None = None) -> Case:
        s_prev = torch.tanh(_randn(g, B, H, dtype=torch.float64)).to(dtype)  # a state an RNN could reach
        y_prev = _randn(g, B, d_y, dtype=dtype)
        enc = _randn(g, B, T, d_h, dtype=dtype)
        W_a = _randn(g, H, a, scale=scale / H ** 0.5, dtype=dtype)
        U_a = _randn(g, d_h, a, scale=scale / d_h ** 0.5, dtype=dtype)
        v_a = _randn(g, a, dtype=dtype)
        W_y = _randn(g, d_y, H, scale=scale / d_y ** 0.5, dtype=dtype)
        W_s = _randn(g, H, H, scale=0.9 * scale / H ** 0.5, dtype=dtype)
        W_c = _randn(g, d_h, H, scale=scale / d_h ** 0.5, dtype=dtype)
        b = _randn(g, H, scale=0.5, dtype=dtype)
        if mask is not None and garbage:  # encoder states at padded positions: garbage that must not leak
            enc = torch.where(mask[..., None], enc, torch.full_like(enc, garbage))
        if layout == "strided":
            enc, s_prev, W_s, U_a = _strided(enc), _strided(s_prev), _transposed_view(W_s), _transposed_view(U_a)
        elif layout == "expanded":  # one source sentence and one state for the whole batch: stride 0
            enc, s_prev = enc[:1].expand_as(enc), s_prev[:1].expand_as(s_prev)
        elif layout == "U_a transposed":
            U_a = U_a.T.contiguous()
        args = (s_prev, y_prev, enc, W_a, U_a, v_a, W_y, W_s, W_c, b)
        kwargs = {}
        if mask is not None:
            if mask_as == "keyword":
                kwargs = {"mask": mask}
            else:
                args = (*args, mask)
        grad_output = _randn(g, B, H, dtype=dtype) if gradients else None
        return Case(args=args, kwargs=kwargs, label=tag(label, dt), grad_output=grad_output, raises=raises)

    f64 = torch.float64
    if gradients:
        return [
            case(2, 5, 4, 3, 6, 5, "gradients, float64: B=2, T=5, H=4, d_y=3, d_h=6, a=5, no mask", dtype=f64),
            case(3, 6, 3, 2, 4, 4, "gradients, float64: B=3, T=6, padding mask", mask=_padding_mask(g, 3, 6),
                 dtype=f64),
        ]
    if dtype != "float32":
        return [
            case(2, 5, 4, 3, 6, 7, "B=2, T=5, H=4, d_y=3, d_h=6, a=7, no mask"),
            case(3, 6, 5, 2, 4, 3, "padding mask, encoder states of the padded positions are garbage (1e3)",
                 mask=_padding_mask(g, 3, 6), garbage=1e3),
        ]
    return [
        case(2, 5, 4, 3, 6, 7, "B=2, T=5, H=4, d_y=3, d_h=6, a=7, no mask"),
        case(3, 6, 5, 2, 4, 3, "padding mask, encoder states of the padded positions are garbage (1e3)",
             mask=_padding_mask(g, 3, 6), garbage=1e3),
        case(4, 4, 3, 5, 2, 6, "B=T=4 (batch and source axes have the same length), random mask",
             mask=_random_mask(g, 4, 4)),
        case(3, 5, 4, 4, 4, 4, "square matrices: H = d_y = d_h = a = 4 (no weight may be swapped for another)"),
        case(1, 1, 3, 2, 4, 5, "a single source position: B=1, T=1"),
        case(2, 6, 3, 2, 5, 4, "mask given as keyword mask=..., one row keeps a single position",
             mask=_random_mask(g, 2, 6), mask_as="keyword"),
        case(4, 5, 3, 2, 4, 3, "a 1-D mask (T,) shared by the batch", mask=_key_mask(g, 5)),
        case(3, 7, 4, 3, 2, 5, "a mask (1, T) broadcast over the batch", mask=_key_mask(g, 1, 7)),
        case(2, 4, 3, 2, 5, 4, "pre-activations past 40 (weights 30 times larger): an exp-based tanh overflows",
             scale=30.0),
        case(2, LONG_LENGTHS[1], 4, 3, 5, 6, f"a long source: B=2, T={LONG_LENGTHS[1]}, padding mask",
             mask=_padding_mask(g, 2, LONG_LENGTHS[1])),
        case(3, 5, 4, 3, 6, 2,
             "non-contiguous encoder states (stored time-major), s_prev, W_s and U_a (transposed views)",
             mask=_padding_mask(g, 3, 5), layout="strided"),
        case(3, 5, 4, 3, 6, 2, "expanded encoder states and s_prev (one of each for the batch, stride 0), "
             "padding mask", mask=_padding_mask(g, 3, 5), layout="expanded"),
        case(3, 6, 4, 3, 5, 2, "float64: B=3, T=6, padding mask", mask=_padding_mask(g, 3, 6), dtype=f64),
        case(2, 5, 4, 3, 6, 7, "U_a of shape (a, d_h) = (7, 6) does not fit the encoder states: an error",
             layout="U_a transposed", raises="Exception"),
        case(3, 6, 5, 2, 4, 3, "padding mask, encoder states of the padded positions are huge but finite (1e30)",
             mask=_padding_mask(g, 3, 6), garbage=1e30),
    ]


def paper_decoder_step(s_prev, y_prev, h, W_a, U_a, v_a, W_y, W_s, W_c, b, mask=None):
    """Bahdanau et al.'s eqs. (4)-(6) in float64, one sequence and one source position at a time, in the
    paper's column-vector notation: e_ij = v_a^T tanh(W_a^T s_{i-1} + U_a^T h_j), alpha_ij = exp(e_ij) /
    sum_k exp(e_ik) over the allowed positions, c_i = sum_j alpha_ij h_j, then the tanh cell
    s_i = tanh(W_y^T y_{i-1} + W_s^T s_{i-1} + W_c^T c_i + b)."""
    s_prev, y_prev, h, W_a, U_a, v_a, W_y, W_s, W_c, b = (
        t.detach().double() for t in (s_prev, y_prev, h, W_a, U_a, v_a, W_y, W_s, W_c, b))
    B, T, _ = h.shape
    allowed = torch.ones(B, T, dtype=torch.bool) if mask is None else mask.expand(B, T)
    states, contexts, alphas = [], [], []
    for i in range(B):
        js = [j for j in range(T) if allowed[i, j]]
        e = {j: float(v_a @ torch.tanh(W_a.T @ s_prev[i] + U_a.T @ h[i, j])) for j in js}
        top = max(e.values())
        z = sum(math.exp(e[j] - top) for j in js)
        alpha = torch.zeros(T, dtype=torch.float64)
        for j in js:
            alpha[j] = math.exp(e[j] - top) / z
        c = sum(alpha[j] * h[i, j] for j in js)
        states.append(torch.tanh(W_y.T @ y_prev[i] + W_s.T @ s_prev[i] + W_c.T @ c + b))
        contexts.append(c)
        alphas.append(alpha)
    return torch.stack(states), torch.stack(contexts), torch.stack(alphas)


def decoder_step_follows_the_paper(cases: list[Case], outputs: list) -> None:
    """``(s_i, c_i, alpha_i)`` equal the paper's loop (:func:`paper_decoder_step`), with messages that name
    the usual slips: the query, the context in the cell, the axis of the softmax, the mask."""
    for case, output in zip(cases, outputs):
        where = f"case '{case.label}'"
        mask = case.args[10] if len(case.args) > 10 else case.kwargs.get("mask")
        assert isinstance(output, tuple) and len(output) == 3, f"{where}: should return (s_i, c_i, alpha_i)"
        s, c, alpha = output
        s_ref, c_ref, alpha_ref = paper_decoder_step(*case.args[:10], mask=mask)
        for name, got, ref in (("alpha_i", alpha, alpha_ref), ("c_i", c, c_ref), ("s_i", s, s_ref)):
            assert isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(ref.shape), (
                f"{where}: {name} should be a tensor of shape {tuple(ref.shape)}, got "
                f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
        assert_weight_rows(where, alpha, mask, "each sequence's weights must sum to 1 over its source positions")
        tol = dict(atol=1e-4, rtol=1e-4)
        assert torch.allclose(alpha.double(), alpha_ref, **tol), (
            f"{where}: alpha_i differs from softmax_j(v_a . tanh(s_prev W_a + h_j U_a)) by up to "
            f"{float((alpha.double() - alpha_ref).abs().max()):.3g}: the query is the previous state s_prev")
        assert torch.allclose(c.double(), c_ref, **tol), \
            f"{where}: c_i must be sum_j alpha_ij h_j, the average of the encoder states with the weights"
        assert torch.allclose(s.double(), s_ref, **tol), (
            f"{where}: s_i differs from tanh(y_prev W_y + s_prev W_s + c_i W_c + b) by up to "
            f"{float((s.double() - s_ref).abs().max()):.3g}: the context enters the cell")


# ---------------------------------------------------------------------------------------------------
# the contract: every clause of the statements -> the hidden cases that exercise it

F16, BF16, F64 = " (float16)", " (bfloat16)", " (float64)"

CONTRACT = {
    "rnn_forward": {
        "h_t = tanh(x_t W_xh + h_{t-1} W_hh + b_h), equal to nn.RNN with the transposed weights":
            ["B=2, T=5, d_in=3, H=4, no h0 (the state starts at zeros)",
             "B=4, T=6, d_in=H=4, h0 given as keyword h0=..."],
        "outputs (B, T, H) batch first: outputs[:, t] is the state after reading x[:, t]":
            ["B=T=5 (batch and time axes have the same length), d_in=3, H=6, h0 given",
             "a single sequence of a single step: B=1, T=1, d_in=2, H=3, h0 given"],
        "h_T (B, H) is the last state": ["B=3, T=4, d_in=5, H=2, h0 given as the fifth argument"],
        "h0 (B, H) given positionally or as keyword; zeros of x's dtype when None":
            ["B=3, T=4, d_in=5, H=2, h0 given as the fifth argument", "B=4, T=6, d_in=H=4, h0 given as keyword h0=...",
             "float64 without h0: the zero state must have x's dtype"],
        "keeps x's dtype in float16, bfloat16, float32 and float64 (without h0 too)":
            ["B=2, T=5, d_in=3, H=4, no h0 (the zero state must have x's dtype)" + F16,
             "B=2, T=5, d_in=3, H=4, no h0 (the zero state must have x's dtype)" + BF16,
             "B=3, T=6, d_in=5, H=2, h0 given" + F64, "float64: B=3, T=7, d_in=6, H=5, h0 given"],
        "pre-activations of any size: tanh saturates (past 40 an exp-based tanh gives inf/inf)":
            ["pre-activations past 40 (x of size ~60): an exp-based tanh overflows to inf/inf",
             "large weights (tanh saturates): B=2, T=8, d_in=3, H=5, h0 given"],
        "sequences of any length": ["a long sequence: B=2, T=30, d_in=3, H=7, no h0",
                                    f"a long sequence: B=2, T={LONG_LENGTHS[1]}, d_in=3, H=4, no h0"],
        "accepts non-contiguous inputs": ["non-contiguous x (stored time-major) and W_hh (a transposed view)"],
        "accepts expanded inputs": ["expanded x (one sequence for the batch, stride 0) and b_h (one value, stride 0)"],
        "differentiable: gradients to x, the weights, the bias and h0":
            ["gradients, float64: B=2, T=4, d_in=3, H=5, h0 given",
             "gradients, float64: B=2, T=9, d_in=4, H=6, h0 given, large weights"],
        "weights that do not fit x raise an error (no silent transpose)":
            ["W_xh of shape (H, d_in) = (4, 3) does not fit x: an error, not a silent transpose"],
        "must not call nn.RNN or nn.RNNCell": ["ban:torch.rnn_tanh", "ban:torch.rnn_tanh_cell"],
        "returns new tensors and leaves the arguments unchanged":
            ["B=3, T=4, d_in=5, H=2, h0 given as the fifth argument"],
    },
    "additive_scores": {
        "scores[b, t] = v . tanh(query[b] W_q + keys[b, t] W_k), raw (B, T), no softmax":
            ["B=2, T=5, d_q=3, d_k=4, a=6", "B=5, T=2, d_q=7, d_k=3, a=4"],
        "the query is broadcast over its own sequence's keys (not over the batch)":
            ["B=T=4 (the query must be broadcast over the keys' T axis), d_q=5, d_k=2, a=3",
             "a single key: B=1, T=1, d_q=2, d_k=3, a=5"],
        "W_q projects the query, W_k the keys":
            ["square matrices: B=3, T=6, d_q=d_k=a=4 (W_q and W_k must not be swapped)"],
        "keeps the inputs' dtype in float16, bfloat16, float32 and float64":
            ["B=2, T=5, d_q=3, d_k=4, a=6" + F16, "B=2, T=5, d_q=3, d_k=4, a=6" + BF16,
             "B=2, T=5, d_q=3, d_k=4, a=6" + F64, "float64: B=3, T=7, d_q=6, d_k=5, a=8"],
        "pre-activations of any size (past 40 an exp-based tanh gives inf/inf)":
            ["pre-activations past 40 (inputs of size ~80): an exp-based tanh overflows to inf/inf",
             "inputs of size ~5 (tanh saturates): B=2, T=6, d_q=3, d_k=5, a=2"],
        "any number of keys": [f"a long sequence of keys: B=2, T={LONG_LENGTHS[2]}, d_q=3, d_k=4, a=5"],
        "accepts non-contiguous inputs": ["non-contiguous query, keys (stored time-major) and W_k (transposed views)"],
        "accepts expanded inputs": ["expanded query and keys (one of each for the batch, stride 0)"],
        "differentiable": ["gradients, float64: B=2, T=5, d_q=3, d_k=4, a=6", "gradients, float64: B=T=3, d_q=d_k=a=4"],
        "weights that do not fit raise an error (no silent transpose)":
            ["W_k of shape (a, d_k) = (6, 4) does not fit the keys: an error, not a silent transpose"],
        "returns a new tensor and leaves the arguments unchanged": ["B=2, T=5, d_q=3, d_k=4, a=6"],
    },
    "attention_pool": {
        "weights = softmax of the scores over the positions (last axis); context = sum_t weights * values":
            ["B=2, T=5, d_v=3, no mask", "B=T=5 (batch and position axes have the same length), random mask"],
        "masked positions (mask False) get weight exactly 0, True = may attend":
            ["B=3, T=6, d_v=4, random mask (True = may attend)", "B=2, T=8, d_v=4, mask with every position allowed",
             "a single position: B=1, T=1, d_v=3, mask all True"],
        "masked scores may hold any value: garbage, +inf, -inf, NaN":
            ["padding mask: B=4, T=7, d_v=2, scores of the padded positions are garbage up to 2e3",
             "+inf scores at the masked positions (any value may stand there)",
             "-inf scores at the masked positions",
             "NaN scores at the masked positions (any value may stand there)"],
        "the values at masked positions may hold any finite value (weight 0 times them is 0)":
            ["values at the masked positions hold any finite value (1e30 here)"],
        "masked values that are inf or NaN": "not gradable: the statement excludes them (a weight of 0 times inf "
                                             "or NaN is NaN)",
        "the mask is (B, T) or broadcastable to it: (T,), (1, T)":
            ["a 1-D mask (T,) shared by the batch", "a mask (1, T) broadcast over the batch"],
        "scores of any size: no overflow":
            ["large scores (around +-500: exp overflows unless you subtract the max), no mask"],
        "masked positions removed (set to -inf), not given a finite score: allowed scores far below -1e4 too":
            ["every allowed score around -3e4, far below -1e4: a finite fill such as -1e4 outweighs them"],
        "keeps the inputs' dtype in float16, bfloat16, float32 and float64 (a mask fill the dtype can hold)":
            ["padding mask: B=4, T=7, d_v=2, scores of the padded positions are garbage up to 2e3" + F16,
             "padding mask: B=4, T=7, d_v=2, scores of the padded positions are garbage up to 2e3" + BF16,
             "random mask, B=3, T=6, d_v=4" + F64, "float64: B=3, T=4, d_v=6, padding mask"],
        "any number of positions": [f"a long sequence: B=2, T={LONG_LENGTHS[2]}, padding mask"],
        "accepts non-contiguous inputs": ["non-contiguous scores and values (stored time-major), padding mask"],
        "each row of weights is a distribution and the context is their average (property)":
            ["B=3, T=6, d_v=4, random mask (True = may attend)"],
        "differentiable": ["gradients, float64: B=3, T=5, d_v=4, no mask",
                           "gradients, float64: B=2, T=6, d_v=3, with a mask"],
        "values of another length raise an error": ["values with T+1 positions for scores with T: an error"],
        "returns new tensors and leaves the arguments unchanged (the scores too)":
            ["B=3, T=6, d_v=4, random mask (True = may attend)"],
        "a fully masked row": "not gradable: the statement excludes it (every row keeps at least one True)",
    },
    "bahdanau_decoder_step": {
        "the query is the previous state: e_ij = v_a . tanh(s_{i-1} W_a + h_j U_a)":
            ["B=2, T=5, H=4, d_y=3, d_h=6, a=7, no mask",
             "square matrices: H = d_y = d_h = a = 4 (no weight may be swapped for another)"],
        "alpha_i = softmax over the source positions (last axis), masked positions exactly 0":
            ["B=T=4 (batch and source axes have the same length), random mask",
             "padding mask, encoder states of the padded positions are garbage (1e3)",
             "mask given as keyword mask=..., one row keeps a single position"],
        "c_i = sum_j alpha_ij h_j": ["a single source position: B=1, T=1",
                                     "padding mask, encoder states of the padded positions are garbage (1e3)"],
        "padded encoder states may hold any finite value (weight 0)":
            ["padding mask, encoder states of the padded positions are garbage (1e3)",
             "padding mask, encoder states of the padded positions are huge but finite (1e30)"],
        "padded encoder states that are inf or NaN": "not gradable: the statement excludes them (0 times inf is NaN)",
        "the context enters the cell: s_i = tanh(y_{i-1} W_y + s_{i-1} W_s + c_i W_c + b)":
            ["B=2, T=5, H=4, d_y=3, d_h=6, a=7, no mask", "float64: B=3, T=6, padding mask"],
        "equal to a loop over the paper's equations (property, float64 oracle)":
            ["B=2, T=5, H=4, d_y=3, d_h=6, a=7, no mask", "a 1-D mask (T,) shared by the batch"],
        "mask None, (B, T) or broadcastable ((T,), (1, T)), positional or keyword":
            ["a 1-D mask (T,) shared by the batch", "a mask (1, T) broadcast over the batch",
             "mask given as keyword mask=..., one row keeps a single position"],
        "keeps the inputs' dtype in float16, bfloat16, float32 and float64":
            ["padding mask, encoder states of the padded positions are garbage (1e3)" + F16,
             "padding mask, encoder states of the padded positions are garbage (1e3)" + BF16,
             "B=2, T=5, H=4, d_y=3, d_h=6, a=7, no mask" + F64],
        "pre-activations of any size (past 40 an exp-based tanh gives inf/inf)":
            ["pre-activations past 40 (weights 30 times larger): an exp-based tanh overflows"],
        "any source length": [f"a long source: B=2, T={LONG_LENGTHS[1]}, padding mask"],
        "accepts non-contiguous inputs":
            ["non-contiguous encoder states (stored time-major), s_prev, W_s and U_a (transposed views)"],
        "accepts expanded inputs": ["expanded encoder states and s_prev (one of each for the batch, stride 0), "
                                    "padding mask"],
        "differentiable through the attention and the cell":
            ["gradients, float64: B=2, T=5, H=4, d_y=3, d_h=6, a=5, no mask",
             "gradients, float64: B=3, T=6, padding mask"],
        "weights that do not fit raise an error":
            ["U_a of shape (a, d_h) = (7, 6) does not fit the encoder states: an error"],
        "returns new tensors and leaves the arguments unchanged": ["B=2, T=5, H=4, d_y=3, d_h=6, a=7, no mask"],
    },
}
