"""Chapter 7, backpropagation through attention: the reference implementations.

Read top to bottom, in the chapter's order: the backward pass of scaled dot-product attention, one matrix
product per gradient, through the softmax's vector-Jacobian product of chapter 3
(:func:`solutions.scaling.softmax_vjp`); the same backward pass from what FlashAttention saves, the output
and one log-sum-exp per query row, the weights rebuilt as ``exp(S - L)``; the first packed into a
``torch.autograd.Function`` whose backward is our own maths; and the bug-hunt's cross-attention layer with
projections, whose keys' gradient is ``dS^T Q / sqrt(d_k)``.

Notation: for a scalar loss ``L`` and a tensor ``X``, ``dX`` is ``dL/dX`` and has the shape of ``X``.
Forward pass: ``S = Q K^T / sqrt(d_k)`` ``(..., T_q, T_k)``, ``A = softmax(S)`` along the keys,
``O = A V`` ``(..., T_q, d_v)``. Every function returns new tensors and leaves its arguments unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from solutions.scaling import softmax_vjp


def attention_backward(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of ``out = softmax(q k^T / sqrt(d_k)) v`` with respect to ``q``, ``k`` and ``v``.

    ``dV = A^T dO``, ``dA = dO V^T``, ``dS = A * (dA - rowsum(dA * A))``, ``dQ = dS K / sqrt(d_k)``,
    ``dK = dS^T Q / sqrt(d_k)`` (not ``Q^T dS``, which is the gradient of ``K^T``).

    Args:
        grad_out: ``dL/d out``, ``(..., T_q, d_v)``.
        q: ``(..., T_q, d_k)``; k: ``(..., T_k, d_k)``; v: ``(..., T_k, d_v)``.
        weights: the forward pass's attention weights ``A`` ``(..., T_q, T_k)``. They may come from a
            masked softmax (exact zeros): masked keys then get no gradient, as autograd would give.

    Returns:
        ``(grad_q, grad_k, grad_v)`` with the shapes of ``q``, ``k`` and ``v``.

    Raises:
        ValueError: when the shapes do not fit together.
    """
    T_q, d_k = q.shape[-2:]
    T_k, d_v = v.shape[-2:]
    if k.shape[-2:] != (T_k, d_k):
        raise ValueError(f"k must have shape (..., T_k={T_k}, d_k={d_k}), got {tuple(k.shape)}")
    if weights.shape[-2:] != (T_q, T_k):
        raise ValueError(f"weights must have shape (..., T_q={T_q}, T_k={T_k}), got {tuple(weights.shape)}")
    if grad_out.shape[-2:] != (T_q, d_v):
        raise ValueError(f"grad_out must have shape (..., T_q={T_q}, d_v={d_v}), got {tuple(grad_out.shape)}")
    scale = 1.0 / math.sqrt(d_k)
    grad_v = weights.transpose(-2, -1) @ grad_out  # (..., T_k, T_q) @ (..., T_q, d_v) -> (..., T_k, d_v)
    grad_weights = grad_out @ v.transpose(-2, -1)  # (..., T_q, d_v) @ (..., d_v, T_k) -> (..., T_q, T_k)
    grad_scores = softmax_vjp(weights, grad_weights, dim=-1)  # (..., T_q, T_k), chapter 3's product
    grad_q = grad_scores @ k * scale  # (..., T_q, T_k) @ (..., T_k, d_k) -> (..., T_q, d_k)
    grad_k = grad_scores.transpose(-2, -1) @ q * scale  # (..., T_k, T_q) @ (..., T_q, d_k) -> (..., T_k, d_k)
    return grad_q, grad_k, grad_v


def attention_backward_from_lse(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
    lse: torch.Tensor, causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward pass of attention from the forward's output and log-sum-exp, without its weights.

    The forward pass saved ``out = P V`` and ``lse_i = log sum_j exp(S_ij)`` of the scaled scores
    ``S = q k^T / sqrt(d_k)`` (masked ones excluded). That is enough: ``P = exp(S - lse)`` rebuilds the
    weights exactly, one exponential per score (no maximum, no sum over the keys), and the row sums of the
    softmax's backward are ``D = rowsum(dO * O)`` (equal to ``rowsum(dP * P)``). Then ``dV = P^T dO``,
    ``dP = dO V^T``, ``dS = P * (dP - D)``, ``dQ = dS K / sqrt(d_k)``, ``dK = dS^T Q / sqrt(d_k)``: the
    algebra of FlashAttention's backward pass, untiled (chapter 9 tiles it).

    Args:
        grad_out: ``dO``, ``(..., T_q, d_v)``.
        q: ``(..., T_q, d_k)``; k: ``(..., T_k, d_k)``; v: ``(..., T_k, d_v)``.
        out: the forward's output ``(..., T_q, d_v)``.
        lse: the forward's log-sum-exp of each query row's scaled scores, ``(..., T_q)``; float32 for half
            inputs, the inputs' dtype otherwise.
        causal: query ``i`` sees keys ``j <= i`` only (top-left aligned when ``T_q != T_k``, like
            ``F.scaled_dot_product_attention(is_causal=True)``): those scores are ``-inf``, ``P = 0`` there.

    Returns:
        ``(grad_q, grad_k, grad_v)`` with the shapes and dtypes of ``q``, ``k`` and ``v``; half-precision
        inputs are computed in float32 inside.

    Raises:
        ValueError: when the shapes do not fit together.
    """
    T_q, d_k = q.shape[-2:]
    T_k, d_v = v.shape[-2:]
    if k.shape[-2:] != (T_k, d_k):
        raise ValueError(f"k must have shape (..., T_k={T_k}, d_k={d_k}), got {tuple(k.shape)}")
    for name, t in (("grad_out", grad_out), ("out", out)):
        if t.shape[-2:] != (T_q, d_v):
            raise ValueError(f"{name} must have shape (..., T_q={T_q}, d_v={d_v}), got {tuple(t.shape)}")
    if lse.shape != out.shape[:-1]:
        raise ValueError(f"lse must have shape {tuple(out.shape[:-1])} (one per query row), got {tuple(lse.shape)}")
    cd = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    q_, k_, v_, o_, do_ = (t.to(cd) for t in (q, k, v, out, grad_out))
    scale = 1.0 / math.sqrt(d_k)
    scores = q_ @ k_.transpose(-2, -1) * scale  # (..., T_q, T_k), recomputed
    if causal:
        visible = torch.ones(T_q, T_k, dtype=torch.bool, device=q.device).tril()  # top-left: j <= i
        scores = scores.masked_fill(~visible, float("-inf"))
    p = torch.exp(scores - lse.to(cd)[..., None])  # (..., T_q, T_k): the forward's weights, exactly
    D = (do_ * o_).sum(dim=-1, keepdim=True)  # (..., T_q, 1): rowsum(dO * O) = rowsum(dP * P)
    grad_v = p.transpose(-2, -1) @ do_  # (..., T_k, d_v)
    grad_p = do_ @ v_.transpose(-2, -1)  # (..., T_q, T_k)
    grad_scores = p * (grad_p - D)  # (..., T_q, T_k)
    grad_q = grad_scores @ k_ * scale  # (..., T_q, d_k)
    grad_k = grad_scores.transpose(-2, -1) @ q_ * scale  # (..., T_k, d_k): dS^T Q
    return grad_q.to(q.dtype), grad_k.to(k.dtype), grad_v.to(v.dtype)


def _attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, weights)`` of scaled dot-product attention, with a stable softmax (no mask)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    scores = scores - scores.amax(dim=-1, keepdim=True)
    e = scores.exp()
    weights = e / e.sum(dim=-1, keepdim=True)  # (..., T_q, T_k)
    return weights @ v, weights  # (..., T_q, d_v)


class AttentionFunction(torch.autograd.Function):
    """Scaled dot-product attention as an autograd ``Function`` whose backward is :func:`attention_backward`.

    ``AttentionFunction.apply(q, k, v) -> out``: ``q`` ``(..., T_q, d_k)``, ``k`` ``(..., T_k, d_k)``,
    ``v`` ``(..., T_k, d_v)``, ``out`` ``(..., T_q, d_v)``. The forward saves ``q, k, v`` and the
    ``(T_q, T_k)`` weights: that matrix, kept for every layer until the backward pass, is where
    training attention spends its O(T^2) memory (FlashAttention recomputes it instead).
    """

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out, weights = _attention_forward(q, k, v)
        ctx.save_for_backward(q, k, v, weights)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v, weights = ctx.saved_tensors
        return attention_backward(grad_out, q, k, v, weights)


class CrossAttentionFunction(torch.autograd.Function):
    """Cross-attention with its projections, ``apply(x, y, W_q, W_k, W_v) -> out``, backward by hand.

    Queries come from ``x`` ``(..., T_q, d_x)``, keys and values from ``y`` ``(..., T_k, d_y)``:
    ``q = x W_q``, ``k = y W_k``, ``v = y W_v`` with ``W_q`` ``(d_x, d_k)``, ``W_k`` ``(d_y, d_k)``,
    ``W_v`` ``(d_y, d_v)`` shared by every sequence of the batch; ``out`` is ``(..., T_q, d_v)``.

    The backward is the bug-hunt's fixed version: ``dK = dS^T Q / sqrt(d_k)``. The bug ``dS Q`` has the
    right shape whenever ``T_q = T_k`` -- always, in self-attention (``y = x``) -- so only a gradient
    check, or a non-square test, finds it. ``y`` reaches the loss through two paths (keys and values),
    so its gradient is the sum of both; the weights' gradients are summed over the batch.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor,
                W_v: torch.Tensor) -> torch.Tensor:
        q, k, v = x @ W_q, y @ W_k, y @ W_v  # (..., T_q, d_k), (..., T_k, d_k), (..., T_k, d_v)
        out, weights = _attention_forward(q, k, v)
        ctx.save_for_backward(x, y, W_q, W_k, W_v, weights)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, y, W_q, W_k, W_v, weights = ctx.saved_tensors
        q, k, v = x @ W_q, y @ W_k, y @ W_v  # recomputed: cheaper to redo than to keep
        grad_q, grad_k, grad_v = attention_backward(grad_out, q, k, v, weights)
        grad_x = grad_q @ W_q.T  # (..., T_q, d_k) @ (d_k, d_x) -> (..., T_q, d_x)
        grad_y = grad_k @ W_k.T + grad_v @ W_v.T  # two paths into y: the keys and the values
        # W is shared by the whole batch: sum x^T dQ over every leading dim
        grad_W_q = torch.einsum("...ti,...tj->ij", x, grad_q)  # (d_x, d_k)
        grad_W_k = torch.einsum("...ti,...tj->ij", y, grad_k)  # (d_y, d_k)
        grad_W_v = torch.einsum("...ti,...tj->ij", y, grad_v)  # (d_y, d_v)
        return grad_x, grad_y, grad_W_q, grad_W_k, grad_W_v
