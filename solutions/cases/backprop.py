"""Hidden-test cases for chapter 7 (backpropagation through attention).

Generators ``<name>_cases(seed, **params) -> list[Case]`` draw every tensor from a
``torch.Generator`` seeded with ``seed``; their labels are shown to a student whose code fails a case.

The gradients are compared in float64 with tolerances of about 1e-10, far tighter than
``torch.autograd.gradcheck`` (which compares with finite differences at about 1e-5): any formula that is
not exactly the gradient fails, while a correct one computed in another order (einsum, loops, the full
softmax Jacobian) differs from the reference only by rounding, about 1e-15. A float32 flavour
(``dtype="float32"``) checks that the dtype is kept. Shapes are chosen so that transposition mistakes
show up twice: as wrong values where the matrices happen to be square (``T_q = T_k``, ``T_k = d_k``), and
as shape errors where they are not.

Gradient cases (``grad_output=...``, ``method="apply"``) call ``Function.apply`` on inputs that require
grad, back-propagate ``grad_output`` and compare the output and the gradient of every input.
"""

from __future__ import annotations

import math

import torch

from grader.checks import Case
from solutions.cases.families import DTYPES, LONG_LENGTHS, tag


def _dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[name]


def _transposed(x: torch.Tensor) -> torch.Tensor:
    """The values of ``x`` in a non-contiguous layout (its last two axes stored transposed). Unlike a strided
    or expanded view, this layout survives the copy the checks make of every input (``clone`` keeps the
    strides of a dense tensor), so the student's code really receives a non-contiguous tensor."""
    return x.transpose(-2, -1).contiguous().transpose(-2, -1)


def _randn(g: torch.Generator, *shape: int, scale: float = 1.0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def _weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Attention weights ``softmax(q k^T / sqrt(d_k))`` (masked keys get exactly 0), in float64."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1)


def _causal(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril()  # (T, T): query i sees keys 0..i


def _key_padding(B: int, T_k: int, length: int) -> torch.Tensor:
    """``(B, 1, 1, T_k)``: sequence 0 is full, the others have ``length`` real keys."""
    lengths = torch.full((B,), length)
    lengths[0] = T_k
    return (torch.arange(T_k)[None, :] < lengths[:, None])[:, None, None, :]


# ---------------------------------------------------------------------------------------------------
# attention_backward_from_lse


def _forward_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[torch.Tensor, ...]:
    """``(out, lse)`` of attention in float64 (causal: top-left, key ``j <= i``), as a forward pass saves them."""
    scores = q.double() @ k.double().transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(~torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (..., T_q)
    return torch.exp(scores - lse[..., None]) @ v.double(), lse


def attention_backward_from_lse_cases(seed: int, dtype: str = "float64") -> list[Case]:
    """``(grad_out, q, k, v, out, lse)`` and ``causal`` from a float64 forward pass (``out`` cast to the dtype,
    ``lse`` to float32 for half inputs): shapes where only values tell a transposition (square) and where shapes
    do, causal masks top-left aligned with ``T_q != T_k`` both ways (a bottom-right mask differs there), scores
    beyond the range of ``exp`` (only ``exp(S - lse)`` stays finite), non-contiguous inputs, edge sizes."""
    g = torch.Generator().manual_seed(seed)
    dt = _dtype(dtype)
    lse_dt = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt

    def case(batch: tuple[int, ...], T_q: int, T_k: int, d_k: int, d_v: int, label: str, causal: bool | None = None,
             scale: float = 1.0, layout=None) -> Case:
        q = _randn(g, *batch, T_q, d_k, scale=scale, dtype=dt)
        k = _randn(g, *batch, T_k, d_k, scale=scale, dtype=dt)
        v = _randn(g, *batch, T_k, d_v, dtype=dt)
        out, lse = _forward_lse(q, k, v, bool(causal))
        grad_out = _randn(g, *batch, T_q, d_v, dtype=dt)
        args = (grad_out, q, k, v, out.to(dt), lse.to(lse_dt))
        if layout is not None:
            args = tuple(layout(t) if t.dim() >= 2 else t for t in args)
        kwargs = {} if causal is None else {"causal": causal}
        return Case(args=args, kwargs=kwargs, label=tag(label, dt))

    every_dtype = [
        case((2,), 3, 5, 4, 6, "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6 (causal left out)"),
        case((2,), 5, 5, 3, 2, "causal=True, T_q=T_k=5, d_k=3, d_v=2", causal=True),
        case((2,), 4, 6, 3, 5, "non-contiguous grad_out, q, k, v and out (stored transposed), causal=True",
             causal=True, layout=_transposed),
    ]
    if dt is not torch.float64:
        return every_dtype
    return every_dtype + [
        case((), 4, 4, 4, 4, "one sequence, T=d_k=d_v=4 (every matrix square: only values tell)"),
        case((3,), 5, 5, 4, 6, "batch of 3, T=5, d_k=4, d_v=6, causal=False given", causal=False),
        case((2,), 2, 7, 3, 5, "cross-attention: batch of 2, T_q=2, T_k=7, d_k=3, d_v=5"),
        case((2,), 6, 4, 8, 2, "cross-attention: batch of 2, T_q=6 > T_k=4, d_k=8, d_v=2"),
        case((2, 3), 5, 7, 4, 3, "two leading batch dims (2, 3), T_q=5, T_k=7, d_k=4, d_v=3"),
        case((2, 4), 6, 6, 8, 8, "causal=True, (B, H) = (2, 4), T=6, d=8", causal=True),
        case((2,), 3, 6, 4, 5, "causal=True, T_q=3 < T_k=6: query i sees keys 0..i (top-left)", causal=True),
        case((2,), 6, 4, 4, 3, "causal=True, T_q=6 > T_k=4: queries 3..5 see every key (top-left)", causal=True),
        case((), 1, 6, 5, 2, "causal=True, a single query: it sees key 0 only", causal=True),
        case((2,), 1, 1, 4, 3, "T_q=T_k=1: a single query and key (all weight on it, no gradient to q, k)"),
        case((), 1, 6, 5, 2, "a single query, T_q=1, T_k=6"),
        case((2,), 3, 4, 4, 5, "scores up to ~1000: exp(S) overflows float64, exp(S - lse) does not", scale=30.0),
        case((2,), 4, 4, 4, 5, "scores up to ~1000, causal=True", causal=True, scale=30.0),
    ]


# ---------------------------------------------------------------------------------------------------
# attention_backward


def attention_backward_cases(seed: int, dtype: str = "float64") -> list[Case]:
    """``(grad_out, q, k, v, weights)`` with the true weights of ``q`` and ``k`` (some masked); in float64 every
    shape below, in the other dtypes a few, a mask and a non-contiguous ``grad_out`` included."""
    g = torch.Generator().manual_seed(seed)
    dt = _dtype(dtype)

    def case(batch: tuple[int, ...], T_q: int, T_k: int, d_k: int, d_v: int, label: str,
             scale: float = 1.0, mask: torch.Tensor | None = None, layout=None) -> Case:
        q = _randn(g, *batch, T_q, d_k, scale=scale, dtype=dt)
        k = _randn(g, *batch, T_k, d_k, scale=scale, dtype=dt)
        v = _randn(g, *batch, T_k, d_v, dtype=dt)
        weights = _weights(q, k, mask).to(dt)
        grad_out = _randn(g, *batch, T_q, d_v, dtype=dt)
        args = (grad_out, q, k, v, weights)
        if layout is not None:
            args = tuple(layout(t) for t in args)
        return Case(args=args, label=tag(label, dt))

    every_dtype = [
        case((2,), 3, 5, 4, 6, "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6"),
        case((), 4, 4, 4, 4, "one sequence, T=d_k=d_v=4 (every matrix square: only values tell)"),
        case((2,), 5, 5, 3, 7, "weights from a causal mask (exact zeros)", mask=_causal(5)),
        case((2,), 3, 6, 4, 5, "non-contiguous grad_out, q, k, v and weights (stored transposed)",
             layout=_transposed),
    ]
    if dt is not torch.float64:
        return every_dtype
    return every_dtype + [
        case((), 3, 3, 2, 2, "one sequence, T_q=T_k=3, d_k=d_v=2 (square scores)"),
        case((3,), 5, 5, 4, 6, "batch of 3, T=5, d_k=4, d_v=6 (d_v != d_k)"),
        case((2,), 2, 7, 3, 5, "cross-attention: batch of 2, T_q=2, T_k=7, d_k=3, d_v=5"),
        case((2,), 6, 4, 8, 2, "cross-attention: batch of 2, T_q=6 > T_k=4, d_k=8, d_v=2"),
        case((2, 3), 5, 7, 4, 3, "two leading batch dims (2, 3), T_q=5, T_k=7, d_k=4, d_v=3"),
        case((2,), 1, 1, 4, 3, "T_q=T_k=1: a single query and key (all weight on it, no gradient to q, k)"),
        case((), 1, 6, 5, 2, "a single query, T_q=1, T_k=6"),
        case((2, 3), 4, 6, 4, 5, "weights from a key-padding mask (B, 1, 1, T_k): keys 4 and 5 of sequence 1 padded",
             mask=_key_padding(2, 6, length=4)),
        case((2,), 3, 4, 16, 5, "large logits: q, k entries of size ~3, scores up to ~40 (saturated)",
             scale=3.0),
    ]


# ---------------------------------------------------------------------------------------------------
# AttentionFunction


def attention_function_cases(seed: int, dtype: str = "float64") -> list[Case]:
    """Gradient cases for ``AttentionFunction.apply(q, k, v)``: output and ``(dq, dk, dv)`` compared; a
    ``grad_output`` that is not contiguous (autograd hands it to ``backward`` as it is) in every dtype."""
    g = torch.Generator().manual_seed(seed)
    dt = _dtype(dtype)

    def case(batch: tuple[int, ...], T_q: int, T_k: int, d_k: int, d_v: int, label: str,
             scale: float = 1.0, layout=None, twice: bool = False, broadcast_grad: bool = False) -> Case:
        q = _randn(g, *batch, T_q, d_k, scale=scale, dtype=dt)
        k = _randn(g, *batch, T_k, d_k, scale=scale, dtype=dt)
        v = _randn(g, *batch, T_k, d_v, dtype=dt)
        grad_output = _randn(g, *batch, T_q, d_v, dtype=dt)
        if broadcast_grad:  # what out.sum(dim=-2) hands back: the same row for every query, stride 0
            grad_output = _randn(g, *batch, 1, d_v, dtype=dt).expand(*batch, T_q, d_v)
        if layout is not None:
            q, k, v, grad_output = (layout(t) for t in (q, k, v, grad_output))
        again = None
        if twice:  # other inputs of the same shapes, applied before the first backward
            again = (_randn(g, *batch, T_q, d_k, dtype=dt), _randn(g, *batch, T_k, d_k, dtype=dt),
                     _randn(g, *batch, T_k, d_v, dtype=dt))
        return Case(args=(q, k, v), method="apply", grad_output=grad_output, again=again, label=tag(label, dt))

    every_dtype = [
        case((2,), 3, 5, 4, 6, "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6"),
        case((2,), 4, 6, 3, 5, "a non-contiguous grad_output and inputs (stored transposed)", layout=_transposed),
    ]
    if dt is not torch.float64:
        return every_dtype
    return every_dtype + [
        case((), 3, 3, 2, 2, "one sequence, T_q=T_k=3, d_k=d_v=2 (square scores)"),
        case((), 4, 4, 4, 4, "one sequence, T=d_k=d_v=4 (every matrix square: only values tell)"),
        case((3,), 5, 5, 4, 6, "batch of 3, T=5, d_k=4, d_v=6 (d_v != d_k)"),
        case((2,), 2, 7, 3, 5, "cross-attention: batch of 2, T_q=2, T_k=7, d_k=3, d_v=5"),
        case((2, 3), 5, 7, 4, 3, "two leading batch dims (2, 3), T_q=5, T_k=7, d_k=4, d_v=3"),
        case((2,), 1, 1, 4, 3, "T_q=T_k=1: a single query and key"),
        case((2,), 3, 4, 16, 5, "large logits: q, k entries of size ~3 (saturated softmax)", scale=3.0),
        case((2,), 3, 5, 4, 6, "applied twice (other q, k, v of the same shapes) before either backward", twice=True),
        case((2,), 4, 5, 3, 2, "a broadcast grad_output (stride 0 along the queries, as out.sum(-2) gives)",
             broadcast_grad=True),
    ]


# ---------------------------------------------------------------------------------------------------
# CrossAttentionFunction (the bug hunt)


def cross_attention_cases(seed: int, dtype: str = "float64") -> list[Case]:
    """Gradient cases for ``CrossAttentionFunction.apply(x, y, W_q, W_k, W_v)``, float64.

    Square cases (``T_q = T_k``, including self-attention with ``y`` equal to ``x``) are where the
    transposed ``dK`` runs without an error and gives wrong values; non-square ones make it fail loudly.
    """
    g = torch.Generator().manual_seed(seed)
    dt = _dtype(dtype)

    def case(batch: tuple[int, ...], T_q: int, T_k: int, d_x: int, d_y: int, d_k: int, d_v: int,
             label: str, self_attention: bool = False, layout=None, twice: bool = False) -> Case:
        def draw():
            x = _randn(g, *batch, T_q, d_x, dtype=dt)
            y = x.clone() if self_attention else _randn(g, *batch, T_k, d_y, dtype=dt)
            W_q = _randn(g, d_x, d_k, scale=d_x ** -0.5, dtype=dt)
            W_k = _randn(g, d_y, d_k, scale=d_y ** -0.5 * 2, dtype=dt)  # a little sharper than uniform attention
            W_v = _randn(g, d_y, d_v, scale=d_y ** -0.5, dtype=dt)
            return x, y, W_q, W_k, W_v

        x, y, W_q, W_k, W_v = draw()
        grad_out = _randn(g, *batch, T_q, d_v, dtype=dt)
        if layout is not None:
            x, y, W_q, W_k, W_v, grad_out = (layout(t) for t in (x, y, W_q, W_k, W_v, grad_out))
        again = draw() if twice else None  # other inputs of the same shapes, applied before the first backward
        return Case(args=(x, y, W_q, W_k, W_v), method="apply", grad_output=grad_out, again=again,
                    label=tag(label, dt))

    if dt is not torch.float64:
        return [
            case((), 4, 4, 6, 5, 3, 2, "square scores: T_q=T_k=4, x and y different, d_x=6, d_y=5, d_k=3, d_v=2"),
            case((2,), 6, 3, 4, 3, 2, 5, "cross-attention, batch of 2: T_q=6 > T_k=3, d_x=4, d_y=3, d_k=2, d_v=5"),
        ]
    return [
        case((2,), 3, 5, 4, 6, 3, 2, "a non-contiguous grad_output and inputs (stored transposed), T_q=3, T_k=5",
             layout=_transposed),
        case((), 4, 4, 6, 6, 3, 5, "self-attention: y equal to x, T=4, d_model=6, d_k=3, d_v=5",
             self_attention=True),
        case((), 4, 4, 6, 5, 3, 2, "square scores: T_q=T_k=4, x and y different, d_x=6, d_y=5, d_k=3, d_v=2"),
        case((2,), 5, 5, 4, 4, 4, 4, "batch of 2, T_q=T_k=5, every width 4"),
        case((), 3, 6, 5, 7, 4, 2, "cross-attention: T_q=3, T_k=6, d_x=5, d_y=7, d_k=4, d_v=2"),
        case((2,), 6, 3, 4, 3, 2, 5, "cross-attention, batch of 2: T_q=6 > T_k=3, d_x=4, d_y=3, d_k=2, d_v=5"),
        case((2, 2), 3, 5, 4, 6, 3, 3,
             "two leading batch dims (2, 2), T_q=3, T_k=5 (W's gradients sum over the batch)"),
        case((), 1, 4, 3, 3, 2, 2, "a single query, T_q=1, T_k=4"),
        case((2,), 3, 5, 4, 6, 3, 2, "applied twice (other inputs of the same shapes) before either backward",
             twice=True),
    ]


# ---------------------------------------------------------------------------------------------------
# the contract: every clause of the notebook's statements -> the hidden cases that exercise it

_BANS = ["ban:torch.autograd.grad", "ban:torch.autograd.backward", "ban:aten._softmax_backward_data"]
_F64 = " (float64)"

CONTRACT = {
    "attention_backward": {
        "dV = A^T dO, dQ = dS K / sqrt(d_k), dK = dS^T Q / sqrt(d_k) (values tell where shapes do not)": [
            "one sequence, T=d_k=d_v=4 (every matrix square: only values tell)" + _F64,
            "one sequence, T_q=T_k=3, d_k=d_v=2 (square scores)" + _F64,
            "batch of 3, T=5, d_k=4, d_v=6 (d_v != d_k)" + _F64],
        "T_q != T_k and d_v != d_k": ["cross-attention: batch of 2, T_q=2, T_k=7, d_k=3, d_v=5" + _F64,
                                      "cross-attention: batch of 2, T_q=6 > T_k=4, d_k=8, d_v=2" + _F64],
        "any leading batch dims": ["two leading batch dims (2, 3), T_q=5, T_k=7, d_k=4, d_v=3" + _F64],
        "uses the given (possibly masked) weights: masked keys get no gradient": [
            "weights from a causal mask (exact zeros)" + _F64,
            "weights from a key-padding mask (B, 1, 1, T_k): keys 4 and 5 of sequence 1 padded" + _F64],
        "edge sizes and saturated weights": [
            "T_q=T_k=1: a single query and key (all weight on it, no gradient to q, k)" + _F64,
            "a single query, T_q=1, T_k=6" + _F64,
            "large logits: q, k entries of size ~3, scores up to ~40 (saturated)" + _F64],
        "keeps the dtype, in float16, bfloat16, float32 and float64 (one check per dtype)": [
            "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6", "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6 (float16)",
            "weights from a causal mask (exact zeros) (bfloat16)", "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6" + _F64],
        "any input may be non-contiguous (grad_out included)": [
            "non-contiguous grad_out, q, k, v and weights (stored transposed)",
            "non-contiguous grad_out, q, k, v and weights (stored transposed)" + _F64],
        "no autograd": _BANS,
    },
    "attention_backward_from_lse": {
        "P = exp(S - lse), D = rowsum(dO * O), dS = P * (dP - D); dV = P^T dO, dQ = dS K / sqrt(d_k), "
        "dK = dS^T Q / sqrt(d_k) (values tell where shapes do not)": [
            "one sequence, T=d_k=d_v=4 (every matrix square: only values tell)" + _F64,
            "batch of 3, T=5, d_k=4, d_v=6, causal=False given" + _F64,
            "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6 (causal left out)" + _F64],
        "T_q != T_k and d_v != d_k; any leading batch dims": [
            "cross-attention: batch of 2, T_q=2, T_k=7, d_k=3, d_v=5" + _F64,
            "cross-attention: batch of 2, T_q=6 > T_k=4, d_k=8, d_v=2" + _F64,
            "two leading batch dims (2, 3), T_q=5, T_k=7, d_k=4, d_v=3" + _F64],
        "causal=True: query i sees keys j <= i, top-left aligned when T_q != T_k (P = 0 elsewhere)": [
            "causal=True, T_q=T_k=5, d_k=3, d_v=2" + _F64, "causal=True, (B, H) = (2, 4), T=6, d=8" + _F64,
            "causal=True, T_q=3 < T_k=6: query i sees keys 0..i (top-left)" + _F64,
            "causal=True, T_q=6 > T_k=4: queries 3..5 see every key (top-left)" + _F64,
            "causal=True, a single query: it sees key 0 only" + _F64],
        "causal defaults to False": ["batch of 2, T_q=3, T_k=5, d_k=4, d_v=6 (causal left out)" + _F64,
                                     "cross-attention: batch of 2, T_q=6 > T_k=4, d_k=8, d_v=2" + _F64],
        "the weights only through exp(S - lse): scores beyond the range of exp": [
            "scores up to ~1000: exp(S) overflows float64, exp(S - lse) does not" + _F64,
            "scores up to ~1000, causal=True" + _F64],
        "no softmax, log-sum-exp or row maximum of your own: the weights are rebuilt from lse": [
            "ban:torch.softmax", "ban:torch.logsumexp", "ban:aten.logsumexp", "ban:aten.amax", "ban:aten.max"],
        "edge sizes": ["T_q=T_k=1: a single query and key (all weight on it, no gradient to q, k)" + _F64,
                       "a single query, T_q=1, T_k=6" + _F64],
        "keeps the dtype, in float16, bfloat16, float32 and float64 (lse float32 for half inputs)": [
            "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6 (causal left out)",
            "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6 (causal left out) (float16)",
            "causal=True, T_q=T_k=5, d_k=3, d_v=2 (bfloat16)",
            "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6 (causal left out)" + _F64],
        "any input may be non-contiguous": [
            "non-contiguous grad_out, q, k, v and out (stored transposed), causal=True",
            "non-contiguous grad_out, q, k, v and out (stored transposed), causal=True" + _F64],
        "no autograd": _BANS,
        "leaves its arguments unchanged": ["one sequence, T=d_k=d_v=4 (every matrix square: only values tell)" + _F64],
        "memory is not graded (the statement says so)": "not gradable: the (T_q, T_k) weights are rebuilt whole "
            "here, as the statement allows; chapter 9's tiled version never holds more than a tile of them",
    },
    "AttentionFunction": {
        "apply(q, k, v) = softmax(q k^T / sqrt(d_k)) v, differentiable through the hand-written backward": [
            "one sequence, T_q=T_k=3, d_k=d_v=2 (square scores)" + _F64,
            "one sequence, T=d_k=d_v=4 (every matrix square: only values tell)" + _F64,
            "batch of 3, T=5, d_k=4, d_v=6 (d_v != d_k)" + _F64],
        "backward returns (grad_q, grad_k, grad_v) in the order of forward's arguments": [
            "cross-attention: batch of 2, T_q=2, T_k=7, d_k=3, d_v=5" + _F64,
            "two leading batch dims (2, 3), T_q=5, T_k=7, d_k=4, d_v=3" + _F64],
        "edge sizes and saturated softmax": ["T_q=T_k=1: a single query and key" + _F64,
                                             "large logits: q, k entries of size ~3 (saturated softmax)" + _F64],
        "any floating dtype: output and gradients keep it (one check per dtype)": [
            "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6", "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6 (float16)",
            "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6 (bfloat16)", "batch of 2, T_q=3, T_k=5, d_k=4, d_v=6" + _F64],
        "grad_out may be non-contiguous (autograd passes it as it comes)": [
            "a non-contiguous grad_output and inputs (stored transposed)",
            "a non-contiguous grad_output and inputs (stored transposed) (float16)",
            "a non-contiguous grad_output and inputs (stored transposed)" + _F64],
        "no autograd inside backward, no F.scaled_dot_product_attention":
            ["ban:torch.autograd.grad", "ban:torch.autograd.backward",
             "ban:torch.nn.functional.scaled_dot_product_attention"],
        "state on ctx, not on the class: two applications before one backward stay apart":
            ["applied twice (other q, k, v of the same shapes) before either backward" + _F64],
        "grad_out may be broadcast (stride 0): no .view on it":
            ["a broadcast grad_output (stride 0 along the queries, as out.sum(-2) gives)" + _F64],
        "passes gradcheck in float64": "visible only: gradcheck runs in the visible tests; the hidden checks "
                                       "compare with the reference gradients at 1e-10, which is stricter",
    },
    "CrossAttentionFunction": {
        "dK = dS^T Q / sqrt(d_k): right values where the shapes are square (self-attention included)": [
            "self-attention: y equal to x, T=4, d_model=6, d_k=3, d_v=5" + _F64,
            "square scores: T_q=T_k=4, x and y different, d_x=6, d_y=5, d_k=3, d_v=2" + _F64,
            "batch of 2, T_q=T_k=5, every width 4" + _F64],
        "runs for T_q != T_k": ["cross-attention: T_q=3, T_k=6, d_x=5, d_y=7, d_k=4, d_v=2" + _F64,
                                "cross-attention, batch of 2: T_q=6 > T_k=3, d_x=4, d_y=3, d_k=2, d_v=5" + _F64,
                                "a single query, T_q=1, T_k=4" + _F64],
        "gradients through the projections: two paths into y, W's gradients summed over the batch": [
            "two leading batch dims (2, 2), T_q=3, T_k=5 (W's gradients sum over the batch)" + _F64,
            "cross-attention, batch of 2: T_q=6 > T_k=3, d_x=4, d_y=3, d_k=2, d_v=5" + _F64],
        "float32 and float64 keep their dtype (one check each)": [
            "square scores: T_q=T_k=4, x and y different, d_x=6, d_y=5, d_k=3, d_v=2",
            "cross-attention, batch of 2: T_q=6 > T_k=3, d_x=4, d_y=3, d_k=2, d_v=5"],
        "grad_out may be non-contiguous": [
            "a non-contiguous grad_output and inputs (stored transposed), T_q=3, T_k=5" + _F64],
        "state on ctx (an autograd Function): two applications before one backward stay apart":
            ["applied twice (other inputs of the same shapes) before either backward" + _F64],
        "no autograd inside backward, no F.scaled_dot_product_attention":
            ["ban:torch.autograd.grad", "ban:torch.nn.functional.scaled_dot_product_attention"],
    },
}
