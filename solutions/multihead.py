"""Chapter 5, multi-head attention: the reference implementations.

Read top to bottom, in the chapter's order: split the model width into heads and merge it back; attention
run in every head at once (the bug-hunt exercise: the split needs a transpose, a bare ``view`` is wrong);
the same packed into an ``nn.Module`` whose fused input projection is laid out like
``nn.MultiheadAttention.in_proj_weight``; and the layer's parameter count, which does not depend on the
number of heads but does on the number of key/value heads (grouped-query attention) and the head width.

Conventions: tokens are rows; ``h`` is the number of heads and ``d_head = d_model / h`` their width; the
heads axis sits just before the token axis, ``(..., h, T, d_head)``, so that attention batches over it. A
boolean mask is True where a query *may attend* to a key (the convention of
``torch.nn.functional.scaled_dot_product_attention``, the opposite of ``nn.MultiheadAttention``'s boolean
masks). Every function returns new tensors and leaves its arguments unchanged.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from solutions.qkv import scaled_dot_product_attention


def _head_width(d_model: int, n_heads: int) -> int:
    """``d_model // n_heads``, or a ValueError when the width does not split evenly."""
    if n_heads <= 0:
        raise ValueError(f"n_heads must be a positive integer, got {n_heads}")
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}: every head must get "
                         "the same width d_head = d_model / n_heads")
    return d_model // n_heads


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Cut the feature axis into ``n_heads`` blocks and move the heads in front of the tokens.

    Head ``i`` gets the columns ``i * d_head .. (i + 1) * d_head - 1`` of every token:
    ``out[..., i, t, :] == x[..., t, i * d_head:(i + 1) * d_head]``. The transpose is what keeps each row of
    the result one token; ``x.view(..., n_heads, T, d_head)`` has the same shape and mixes tokens.

    Args:
        x: ``(..., T, d_model)``, usually ``(B, T, d_model)``; any dtype.
        n_heads: the number of heads ``h``; must divide ``d_model``.

    Returns:
        ``(..., h, T, d_head)`` with ``d_head = d_model / h`` (a view of ``x``, not a copy).

    Raises:
        ValueError: when ``n_heads`` does not divide ``d_model`` or ``x`` has no token axis.
    """
    if x.dim() < 2:
        raise ValueError(f"x must have shape (..., T, d_model), got {tuple(x.shape)}")
    d_head = _head_width(x.shape[-1], n_heads)
    x = x.view(*x.shape[:-1], n_heads, d_head)  # (..., T, h, d_head): head i owns column block i
    return x.transpose(-3, -2)  # (..., h, T, d_head)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`split_heads`: concatenate the heads' features of every token.

    ``out[..., t, i * d_head:(i + 1) * d_head] == x[..., i, t, :]``, so ``merge_heads(split_heads(x, h))``
    equals ``x``.

    Args:
        x: ``(..., h, T, d_head)``.

    Returns:
        ``(..., T, h * d_head)``, a new contiguous tensor.

    Raises:
        ValueError: when ``x`` has fewer than three dims.
    """
    if x.dim() < 3:
        raise ValueError(f"x must have shape (..., h, T, d_head), got {tuple(x.shape)}")
    x = x.transpose(-3, -2)  # (..., T, h, d_head), no longer contiguous
    return x.flatten(-2)  # (..., T, h * d_head); flatten copies where a view is impossible


def heads_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_heads: int, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention in ``n_heads`` heads at once, on already projected q, k, v.

    Splits the feature axes into heads, lets every head attend separately with the scale
    ``1 / sqrt(d_head)``, and concatenates the heads' outputs back, token by token.

    Args:
        q: ``(..., T_q, d_model)``.
        k: ``(..., T_k, d_model)``; ``T_k`` may differ from ``T_q``.
        v: ``(..., T_k, d_v)``, ``d_v`` divisible by ``n_heads`` (``d_v = d_model`` in a Transformer).
        n_heads: the number of heads ``h``; must divide ``d_model``.
        mask: optional bool, broadcastable to ``(..., h, T_q, T_k)``: ``(T_q, T_k)``, ``(B, 1, T_q, T_k)``,
            ``(B, 1, 1, T_k)`` or one mask per head ``(B, h, T_q, T_k)``. True = may attend; no query row
            may be fully masked.

    Returns:
        ``(out, weights)``: ``out`` ``(..., T_q, d_v)``, the heads' outputs side by side;
        ``weights`` ``(..., h, T_q, T_k)``, one distribution over the keys per head and query.

    Raises:
        ValueError: when q and k differ in width, a width is not divisible by ``n_heads``, or the mask
            does not broadcast.
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same width, got {q.shape[-1]} and {k.shape[-1]}")
    qh, kh, vh = (split_heads(t, n_heads) for t in (q, k, v))  # (..., h, T, d_head)
    out, weights = scaled_dot_product_attention(qh, kh, vh, mask)  # scale 1/sqrt(d_head), from qh
    return merge_heads(out), weights  # (..., T_q, d_v), (..., h, T_q, T_k)


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention with a fused input projection, laid out like ``nn.MultiheadAttention``.

    ``qkv_proj = nn.Linear(d_model, 3 * d_model, bias)``: rows ``0 .. d_model-1`` of its weight make the
    queries, the next ``d_model`` rows the keys, the last ``d_model`` rows the values (the layout of
    ``nn.MultiheadAttention.in_proj_weight``), and inside each block head ``i`` owns rows
    ``i * d_head .. (i + 1) * d_head - 1``. ``out_proj = nn.Linear(d_model, d_model, bias)`` mixes the
    concatenated heads.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True):
        super().__init__()
        _head_width(d_model, n_heads)
        self.d_model, self.n_heads = d_model, n_heads
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, return_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Every token of ``x`` ``(B, T, d_model)`` attends to every token of ``x``, in every head.

        ``mask``: optional bool broadcastable to ``(B, h, T, T)`` (e.g. ``(T, T)``, ``(B, 1, T, T)``,
        ``(B, 1, 1, T)``), True = may attend, no fully masked row.
        Returns ``out`` ``(B, T, d_model)``, or ``(out, weights)`` with ``weights`` ``(B, h, T, T)`` when
        ``return_weights``.
        """
        q, k, v = self.qkv_proj(x).chunk(3, dim=-1)  # each (B, T, d_model): the q, k, v row blocks
        out, weights = heads_attention(q, k, v, self.n_heads, mask)  # (B, T, d_model), (B, h, T, T)
        out = self.out_proj(out)  # (B, T, d_model)
        return (out, weights) if return_weights else out


def attention_param_count(d_model: int, n_heads: int, n_kv_heads: int | None = None,
                          d_head: int | None = None, bias: bool = True) -> int:
    """Number of parameters of a multi-head attention layer with ``n_kv_heads`` key/value heads.

    The layer has a query projection per query head, ``W_Q^i`` ``(d_model, d_head)`` for ``i < n_heads``;
    a key and a value projection per key/value head, ``W_K^j``, ``W_V^j`` ``(d_model, d_head)`` for
    ``j < n_kv_heads``; and an output projection ``W_O`` ``(n_heads * d_head, d_model)`` from the
    concatenated query heads back to the model width; with ``bias`` each projection has a bias of its
    output width. That is chapter 10's ``GroupedQueryAttention`` (``n_kv_heads`` heads shared by groups
    of ``n_heads / n_kv_heads`` query heads), and with the defaults ``n_kv_heads = n_heads``,
    ``d_head = d_model / n_heads`` it is :class:`MultiHeadAttention` and ``nn.MultiheadAttention``:
    ``4 d_model^2 + 4 d_model`` parameters. Pure integer arithmetic, exact for any size.

    Args:
        d_model: the model width (>= 1).
        n_heads: query heads (>= 1).
        n_kv_heads: key/value heads, dividing ``n_heads``; None means ``n_heads`` (multi-head attention).
        d_head: the width of every head; None means ``d_model / n_heads``, which must then be an integer.
        bias: whether every projection has a bias.

    Returns:
        The count, a Python ``int``.

    Raises:
        ValueError: when a size is < 1, ``n_kv_heads`` does not divide ``n_heads``, or ``d_head`` is None
            and ``n_heads`` does not divide ``d_model``.
    """
    for name, value in (("d_model", d_model), ("n_heads", n_heads)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if n_kv_heads is None:
        n_kv_heads = n_heads
    if n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} must be >= 1 and divide n_heads={n_heads}")
    if d_head is None:
        d_head = _head_width(d_model, n_heads)
    elif d_head < 1:
        raise ValueError(f"d_head must be >= 1, got {d_head}")
    q_width, kv_width = n_heads * d_head, n_kv_heads * d_head  # outputs of W_Q, and of W_K and of W_V
    weights = d_model * q_width + 2 * d_model * kv_width + q_width * d_model  # W_Q, W_K, W_V, W_O
    biases = q_width + 2 * kv_width + d_model if bias else 0
    return int(weights + biases)
