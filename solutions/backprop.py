"""Chapter 7, backpropagation through attention: the reference implementations.

Read top to bottom, in the chapter's order: the backward pass of a softmax (a vector-Jacobian product
that never builds the Jacobian); the backward pass of scaled dot-product attention, one matrix product
per gradient; both packed into a ``torch.autograd.Function`` whose backward is our own maths; and the
bug-hunt's cross-attention layer with projections, whose keys' gradient is ``dS^T Q / sqrt(d_k)``.

Notation: for a scalar loss ``L`` and a tensor ``X``, ``dX`` is ``dL/dX`` and has the shape of ``X``.
Forward pass: ``S = Q K^T / sqrt(d_k)`` ``(..., T_q, T_k)``, ``A = softmax(S)`` along the keys,
``O = A V`` ``(..., T_q, d_v)``. Every function returns new tensors and leaves its arguments unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def softmax_backward(grad_p: torch.Tensor, p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``dL/ds`` from ``dL/dp``, for ``p = softmax(s)`` along ``dim``.

    The Jacobian is ``dp_i/ds_j = p_i (delta_ij - p_j)``, so ``ds_j = p_j (dp_j - sum_i dp_i p_i)``:
    one weighted sum per slice instead of an ``n x n`` matrix. Entries with ``p = 0`` (masked keys) get
    gradient exactly 0, and every slice of the result sums to 0 (adding a constant to ``s`` changes
    nothing).

    Args:
        grad_p: ``dL/dp``, the shape of ``p``.
        p: softmax probabilities, any shape, summing to 1 along ``dim``.
        dim: the axis of the softmax.

    Returns:
        ``dL/ds``, a new tensor of ``p``'s shape.

    Raises:
        ValueError: when ``grad_p`` and ``p`` differ in shape.
    """
    if grad_p.shape != p.shape:
        raise ValueError(f"grad_p and p must have the same shape, got {tuple(grad_p.shape)} "
                         f"and {tuple(p.shape)}")
    dot = (grad_p * p).sum(dim=dim, keepdim=True)  # sum_i dp_i p_i, one per slice
    return p * (grad_p - dot)


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
    grad_scores = softmax_backward(grad_weights, weights, dim=-1)  # (..., T_q, T_k)
    grad_q = grad_scores @ k * scale  # (..., T_q, T_k) @ (..., T_k, d_k) -> (..., T_q, d_k)
    grad_k = grad_scores.transpose(-2, -1) @ q * scale  # (..., T_k, T_q) @ (..., T_q, d_k) -> (..., T_k, d_k)
    return grad_q, grad_k, grad_v


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
