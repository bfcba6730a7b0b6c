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

_DTYPES = {"float64": torch.float64, "float32": torch.float32}


def _dtype(name: str) -> torch.dtype:
    if name not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {name!r}")
    return _DTYPES[name]


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
# softmax_backward


def softmax_backward_cases(seed: int, dtype: str = "float64") -> list[Case]:
    """Pairs ``(grad_p, p)`` with ``p`` a softmax along ``dim``: any axis, square shapes (where a sum
    without ``keepdim`` broadcasts silently), saturated rows and exact zeros from a mask."""
    g = torch.Generator().manual_seed(seed)
    dt = _dtype(dtype)

    def case(shape: tuple[int, ...], label: str, dim: int | None = None, scale: float = 1.0,
             logits: torch.Tensor | None = None) -> Case:
        s = _randn(g, *shape, scale=scale) if logits is None else logits
        p = torch.softmax(s, dim=-1 if dim is None else dim).to(dt)
        grad_p = _randn(g, *shape, dtype=dt)
        kwargs = {} if dim is None else {"dim": dim}
        return Case(args=(grad_p, p), kwargs=kwargs, label=label)

    if dt is torch.float32:
        return [
            case((4, 7), "float32 rows of shape (4, 7) (dtype must be kept)"),
            case((2, 3, 5), "float32, shape (2, 3, 5) along dim=1", dim=1),
        ]
    masked = _randn(g, 2, 5, 5).masked_fill(~_causal(5), float("-inf"))
    return [
        case((5,), "a vector of 5 probabilities"),
        case((4, 7), "rows of shape (4, 7), default dim=-1"),
        case((5, 5), "square (5, 5), default dim=-1 (a sum without keepdim broadcasts the wrong way)"),
        case((2, 3, 6), "shape (2, 3, 6) along dim=1", dim=1),
        case((5, 4), "shape (5, 4) along dim=0 (columns)", dim=0),
        case((4, 4), "square (4, 4) along dim=0", dim=0),
        case((2, 4, 3), "shape (2, 4, 3) along dim=-2", dim=-2),
        case((2, 3, 4, 6), "attention-shaped (B=2, H=3, T_q=4, T_k=6)"),
        case((3, 6), "saturated rows: logits with standard deviation 30 (almost one-hot)", scale=30.0),
        case((2, 5, 5), "rows with exact zeros from a causal mask", logits=masked),
        case((4, 1), "a single entry along dim=-1 (shape (4, 1)): its gradient is 0"),
    ]


# ---------------------------------------------------------------------------------------------------
# attention_backward


def attention_backward_cases(seed: int, dtype: str = "float64") -> list[Case]:
    """``(grad_out, q, k, v, weights)`` with the true weights of ``q`` and ``k`` (some masked)."""
    g = torch.Generator().manual_seed(seed)
    dt = _dtype(dtype)

    def case(batch: tuple[int, ...], T_q: int, T_k: int, d_k: int, d_v: int, label: str,
             scale: float = 1.0, mask: torch.Tensor | None = None) -> Case:
        q = _randn(g, *batch, T_q, d_k, scale=scale, dtype=dt)
        k = _randn(g, *batch, T_k, d_k, scale=scale, dtype=dt)
        v = _randn(g, *batch, T_k, d_v, dtype=dt)
        weights = _weights(q, k, mask).to(dt)
        grad_out = _randn(g, *batch, T_q, d_v, dtype=dt)
        return Case(args=(grad_out, q, k, v, weights), label=label)

    if dt is torch.float32:
        return [
            case((2,), 3, 5, 4, 6, "float32, batch of 2, T_q=3, T_k=5, d_k=4, d_v=6 (dtype must be kept)"),
            case((), 4, 4, 4, 4, "float32, one sequence, T=d_k=d_v=4"),
        ]
    return [
        case((), 3, 3, 2, 2, "one sequence, T_q=T_k=3, d_k=d_v=2 (square scores)"),
        case((), 4, 4, 4, 4, "one sequence, T=d_k=d_v=4 (every matrix square: only values tell)"),
        case((3,), 5, 5, 4, 6, "batch of 3, T=5, d_k=4, d_v=6 (d_v != d_k)"),
        case((2,), 2, 7, 3, 5, "cross-attention: batch of 2, T_q=2, T_k=7, d_k=3, d_v=5"),
        case((2,), 6, 4, 8, 2, "cross-attention: batch of 2, T_q=6 > T_k=4, d_k=8, d_v=2"),
        case((2, 3), 5, 7, 4, 3, "two leading batch dims (2, 3), T_q=5, T_k=7, d_k=4, d_v=3"),
        case((2,), 1, 1, 4, 3, "T_q=T_k=1: a single query and key (all weight on it, no gradient to q, k)"),
        case((), 1, 6, 5, 2, "a single query, T_q=1, T_k=6"),
        case((2,), 5, 5, 3, 7, "weights from a causal mask (exact zeros)", mask=_causal(5)),
        case((2, 3), 4, 6, 4, 5, "weights from a key-padding mask (B, 1, 1, T_k): keys 4 and 5 of sequence 1 padded",
             mask=_key_padding(2, 6, length=4)),
        case((2,), 3, 4, 16, 5, "large logits: q, k entries of size ~3, scores up to ~40 (saturated)",
             scale=3.0),
    ]


# ---------------------------------------------------------------------------------------------------
# AttentionFunction


def attention_function_cases(seed: int, dtype: str = "float64") -> list[Case]:
    """Gradient cases for ``AttentionFunction.apply(q, k, v)``: output and ``(dq, dk, dv)`` compared."""
    g = torch.Generator().manual_seed(seed)
    dt = _dtype(dtype)

    def case(batch: tuple[int, ...], T_q: int, T_k: int, d_k: int, d_v: int, label: str,
             scale: float = 1.0) -> Case:
        q = _randn(g, *batch, T_q, d_k, scale=scale, dtype=dt)
        k = _randn(g, *batch, T_k, d_k, scale=scale, dtype=dt)
        v = _randn(g, *batch, T_k, d_v, dtype=dt)
        return Case(args=(q, k, v), method="apply", grad_output=_randn(g, *batch, T_q, d_v, dtype=dt),
                    label=label)

    if dt is torch.float32:
        return [case((2,), 3, 5, 4, 6, "float32, batch of 2, T_q=3, T_k=5, d_k=4, d_v=6 (dtype must be kept)")]
    return [
        case((), 3, 3, 2, 2, "one sequence, T_q=T_k=3, d_k=d_v=2 (square scores)"),
        case((), 4, 4, 4, 4, "one sequence, T=d_k=d_v=4 (every matrix square: only values tell)"),
        case((3,), 5, 5, 4, 6, "batch of 3, T=5, d_k=4, d_v=6 (d_v != d_k)"),
        case((2,), 2, 7, 3, 5, "cross-attention: batch of 2, T_q=2, T_k=7, d_k=3, d_v=5"),
        case((2, 3), 5, 7, 4, 3, "two leading batch dims (2, 3), T_q=5, T_k=7, d_k=4, d_v=3"),
        case((2,), 1, 1, 4, 3, "T_q=T_k=1: a single query and key"),
        case((2,), 3, 4, 16, 5, "large logits: q, k entries of size ~3 (saturated softmax)", scale=3.0),
    ]


# ---------------------------------------------------------------------------------------------------
# CrossAttentionFunction (the bug hunt)


def cross_attention_cases(seed: int) -> list[Case]:
    """Gradient cases for ``CrossAttentionFunction.apply(x, y, W_q, W_k, W_v)``, float64.

    Square cases (``T_q = T_k``, including self-attention with ``y`` equal to ``x``) are where the
    transposed ``dK`` runs without an error and gives wrong values; non-square ones make it fail loudly.
    """
    g = torch.Generator().manual_seed(seed)

    def case(batch: tuple[int, ...], T_q: int, T_k: int, d_x: int, d_y: int, d_k: int, d_v: int,
             label: str, self_attention: bool = False) -> Case:
        x = _randn(g, *batch, T_q, d_x)
        y = x.clone() if self_attention else _randn(g, *batch, T_k, d_y)
        W_q = _randn(g, d_x, d_k, scale=d_x ** -0.5)
        W_k = _randn(g, d_y, d_k, scale=d_y ** -0.5 * 2)  # a little sharper than uniform attention
        W_v = _randn(g, d_y, d_v, scale=d_y ** -0.5)
        grad_out = _randn(g, *batch, T_q, d_v)
        return Case(args=(x, y, W_q, W_k, W_v), method="apply", grad_output=grad_out, label=label)

    return [
        case((), 4, 4, 6, 6, 3, 5, "self-attention: y equal to x, T=4, d_model=6, d_k=3, d_v=5",
             self_attention=True),
        case((), 4, 4, 6, 5, 3, 2, "square scores: T_q=T_k=4, x and y different, d_x=6, d_y=5, d_k=3, d_v=2"),
        case((2,), 5, 5, 4, 4, 4, 4, "batch of 2, T_q=T_k=5, every width 4"),
        case((), 3, 6, 5, 7, 4, 2, "cross-attention: T_q=3, T_k=6, d_x=5, d_y=7, d_k=4, d_v=2"),
        case((2,), 6, 3, 4, 3, 2, 5, "cross-attention, batch of 2: T_q=6 > T_k=3, d_x=4, d_y=3, d_k=2, d_v=5"),
        case((2, 2), 3, 5, 4, 6, 3, 3,
             "two leading batch dims (2, 2), T_q=3, T_k=5 (W's gradients sum over the batch)"),
        case((), 1, 4, 3, 3, 2, 2, "a single query, T_q=1, T_k=4"),
    ]
