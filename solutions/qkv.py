"""Chapter 2, queries, keys and values: the reference implementations.

Read top to bottom, in the chapter's order: project tokens to queries, keys and values; a stable
softmax; scaled dot-product attention with a boolean mask; the same packed into an ``nn.Module``;
sinusoidal positional encodings, which break self-attention's permutation equivariance.

Conventions: a sequence is ``(..., T, d)`` with any number of leading batch dims, tokens are rows,
and a boolean mask is True where a query *may attend* to a key (the convention of
``torch.nn.functional.scaled_dot_product_attention``). Every function returns new tensors and leaves
its arguments unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from solutions._common import check_mask


def project_qkv(
    x: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor, W_v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Project a sequence to queries, keys and values: ``q = x @ W_q``, ``k = x @ W_k``, ``v = x @ W_v``.

    Args:
        x: tokens as rows, ``(..., T, d_model)``, any number of leading batch dims.
        W_q, W_k: ``(d_model, d_k)``; W_v: ``(d_model, d_v)``.

    Returns:
        ``(q, k, v)`` of shapes ``(..., T, d_k)``, ``(..., T, d_k)``, ``(..., T, d_v)``.

    Raises:
        ValueError: when a matrix does not have ``d_model`` rows, or ``W_q`` and ``W_k`` differ in width
            (queries and keys meet in a dot product, so they must live in the same space).
    """
    d_model = x.shape[-1]
    for name, W in (("W_q", W_q), ("W_k", W_k), ("W_v", W_v)):
        if W.dim() != 2 or W.shape[0] != d_model:
            raise ValueError(f"{name} must have shape (d_model={d_model}, width), got {tuple(W.shape)}")
    if W_q.shape[1] != W_k.shape[1]:
        raise ValueError(f"W_q and W_k must have the same width d_k, got {W_q.shape[1]} and {W_k.shape[1]}")
    q = x @ W_q  # (..., T, d_k)
    k = x @ W_k  # (..., T, d_k)
    v = x @ W_v  # (..., T, d_v)
    return q, k, v


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax along ``dim``: ``exp(x - max) / sum(exp(x - max))``.

    Subtracting the maximum changes nothing mathematically (softmax is invariant to adding a constant
    along ``dim``) but keeps every exponent <= 0, so inputs of 1e4 do not overflow to inf. Entries of
    ``-inf`` get weight exactly 0 as long as their slice along ``dim`` holds one finite entry; a slice
    that is all ``-inf`` gives NaN, like ``torch.softmax`` (chapter 4 deals with fully masked rows).

    Args:
        x: floating tensor of any shape.
        dim: the axis whose entries form one distribution.

    Returns:
        A new tensor of ``x``'s shape and dtype, non-negative, summing to 1 along ``dim``.
    """
    z = x - x.amax(dim=dim, keepdim=True)  # <= 0 everywhere, and 0 at the max
    e = z.exp()
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q k^T / sqrt(d_k)) v``, with an optional boolean mask, returning output and weights.

    Args:
        q: queries ``(..., T_q, d_k)``.
        k: keys ``(..., T_k, d_k)``; ``T_k`` may differ from ``T_q`` (cross-attention).
        v: values ``(..., T_k, d_v)``; ``d_v`` may differ from ``d_k``.
        mask: optional bool tensor broadcastable to the scores ``(..., T_q, T_k)``; True means the
            query may attend to the key. Every query row must keep at least one key: a fully masked row
            has no distribution to normalise and gives NaN (chapter 4 handles that case).

    Returns:
        ``(out, weights)``: ``out`` ``(..., T_q, d_v)``; ``weights`` ``(..., T_q, T_k)``, each row a
        probability distribution over the keys, exactly 0 where the mask is False.

    Raises:
        TypeError: when ``mask`` is not a bool tensor.
        ValueError: when q and k differ in ``d_k``, k and v differ in ``T_k``, or the mask does not
            broadcast to the scores.
    """
    d_k = q.shape[-1]
    if k.shape[-1] != d_k:
        raise ValueError(f"q and k must share d_k, got q (..., {q.shape[-2]}, {d_k}) "
                         f"and k (..., {k.shape[-2]}, {k.shape[-1]})")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have one row per key, got T_k={k.shape[-2]} and {v.shape[-2]}")
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        check_mask(mask, scores.shape)
        # -inf before the softmax: exp(-inf) = 0, so the allowed keys share all of the weight
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)  # (..., T_q, T_k), a distribution over keys for every query
    out = weights @ v  # (..., T_q, d_v)
    return out, weights


class SelfAttention(nn.Module):
    """Single-head self-attention: queries, keys and values are three linear views of the same tokens.

    ``W_q``, ``W_k``: ``nn.Linear(d_model, d_k, bias)``; ``W_v``: ``nn.Linear(d_model, d_v, bias)`` with
    ``d_v`` defaulting to ``d_k``. ``nn.Linear`` computes ``x @ weight.T + bias``, so ``W_q.weight.T``
    plays the part of the ``(d_model, d_k)`` matrix of :func:`project_qkv`.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, bias: bool = False):
        super().__init__()
        d_v = d_v or d_k
        self.W_q = nn.Linear(d_model, d_k, bias=bias)
        self.W_k = nn.Linear(d_model, d_k, bias=bias)
        self.W_v = nn.Linear(d_model, d_v, bias=bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Attend from every token of ``x`` ``(..., T, d_model)`` to every token of ``x``.

        ``mask``: optional bool, broadcastable to ``(..., T, T)``, True = may attend, no fully masked row.
        Returns ``(..., T, d_v)``.
        """
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)  # (..., T, d_k), (..., T, d_k), (..., T, d_v)
        out, _ = scaled_dot_product_attention(q, k, v, mask)  # (..., T, d_v)
        return out


def sinusoidal_positions(T: int, d_model: int) -> torch.Tensor:
    """The sinusoidal positional encodings of Vaswani et al. (2017), interleaved as in the paper.

    ``PE[pos, 2i] = sin(pos / 10000^(2i / d_model))`` and
    ``PE[pos, 2i + 1] = cos(pos / 10000^(2i / d_model))`` for ``pos`` in ``0..T-1`` and ``i`` in
    ``0..d_model/2-1``: pair ``i`` turns at angular frequency ``10000^(-2i/d_model)``, from 1 rad per
    position down to nearly 1/10000.

    Returns:
        ``(T, d_model)`` float32, to be added to the token embeddings.

    Raises:
        ValueError: when ``d_model`` is not a positive even number or ``T`` is negative.
    """
    if d_model <= 0 or d_model % 2:
        raise ValueError(f"d_model must be a positive even number (sin/cos pairs), got {d_model}")
    if T < 0:
        raise ValueError(f"T must be >= 0, got {T}")
    # float64 for the angles: pos * frequency loses digits in float32 once pos is in the thousands
    pos = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,)
    angles = pos / 10000.0 ** (two_i / d_model)  # (T, d_model/2)
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (T, d_model/2, 2): pair i = (sin, cos)
    return pe.reshape(T, d_model).to(torch.float32)  # (T, d_model): sin, cos, sin, cos, ...
