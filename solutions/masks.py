"""Chapter 4, masks: the reference implementations.

In the chapter's order: the causal mask of a decoder, the padding mask of a batch of sequences of
different lengths, their combination in the ``(B, 1, T, T)`` layout that broadcasts over heads, a
softmax that gives fully masked rows zeros instead of NaN (in the forward and the backward pass), and
causal self-attention, the fixed version of the chapter's bug hunt.

Convention: a mask is a ``torch.bool`` tensor and **True means "may attend"**, as in
``torch.nn.functional.scaled_dot_product_attention``; ``nn.MultiheadAttention``'s ``key_padding_mask``
and boolean ``attn_mask`` use the opposite polarity (True = ignore). Every function returns new tensors
and leaves its arguments unchanged.
"""

from __future__ import annotations

import math

import torch

from solutions._common import check_mask


def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``(T, T)`` bool, ``m[i, j] = j <= i``: query ``i`` may attend to itself and to earlier keys only.

    Raises:
        ValueError: when ``T`` is negative.
    """
    if T < 0:
        raise ValueError(f"T must be >= 0, got {T}")
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()  # (T, T): on and below the diagonal


def padding_mask(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """``(B, T)`` bool, ``m[b, j] = j < lengths[b]``: True at the real tokens, False at the padding.

    Args:
        lengths: ``(B,)`` integer tensor, each length in ``0..T``.
        T: the padded length.

    Raises:
        ValueError: when ``lengths`` is not a 1-D integer tensor or a length is outside ``0..T``.
    """
    if not isinstance(lengths, torch.Tensor) or lengths.dim() != 1 or lengths.is_floating_point():
        raise ValueError("lengths must be a 1-D integer tensor (one length per sequence)")
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > T):
        raise ValueError(f"every length must lie in 0..T={T}, got {lengths.tolist()}")
    positions = torch.arange(T, device=lengths.device)  # (T,)
    return positions[None, :] < lengths[:, None]  # (B, T)


def attention_mask(lengths: torch.Tensor, T: int, causal: bool = False) -> torch.Tensor:
    """``(B, 1, T, T)`` bool: ``m[b, 0, i, j] = j < lengths[b]`` (and ``j <= i`` when ``causal``).

    Only *keys* are masked: a padded query row still sees the real keys (its output is ignored later,
    by the loss), so no row is fully masked unless a sequence has length 0. The singleton axis 1
    broadcasts over attention heads ``(B, H, T, T)``.
    """
    keys = padding_mask(lengths, T)[:, None, None, :]  # (B, 1, 1, T): the same keys for every query
    allowed = causal_mask(T, device=lengths.device) if causal else torch.ones(
        T, T, dtype=torch.bool, device=lengths.device)  # (T, T)
    return keys & allowed  # (B, 1, T, T)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of ``scores`` along ``dim`` over the entries where ``mask`` is True; 0 elsewhere.

    A slice along ``dim`` with no True entry (a fully masked row) gives all zeros, not NaN, and the
    gradient with respect to ``scores`` is finite everywhere (0 at masked entries). Masked entries may
    hold any value, even ``inf`` or NaN: they are never read.

    Args:
        scores: floating tensor of any shape.
        mask: bool tensor broadcastable to ``scores.shape``; True = may attend.
        dim: the axis that forms one distribution.

    Returns:
        A tensor of ``scores``' shape and dtype; each slice along ``dim`` sums to 1 if it has a True
        entry and is all zeros otherwise.

    Raises:
        TypeError: when ``mask`` is not a bool tensor.
        ValueError: when ``mask`` does not broadcast to ``scores``.
    """
    check_mask(mask, scores.shape)
    filled = scores.masked_fill(~mask, float("-inf"))
    # the shift changes nothing mathematically, so it needs no gradient; a fully masked slice has
    # max -inf, replaced by 0 so that exp(-inf - 0) = 0 instead of exp(-inf + inf) = NaN
    shift = filled.amax(dim=dim, keepdim=True).detach()
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(filled - shift)  # exactly 0 where masked
    total = e.sum(dim=dim, keepdim=True)  # >= 1 if the slice has a True entry, else 0
    return e / torch.where(total > 0, total, torch.ones_like(total))


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal self-attention ``softmax(q k^T / sqrt(d_k) + causal) v``: position ``i`` sees ``0..i``.

    Args:
        q, k: ``(..., T, d_k)``; v: ``(..., T, d_v)``; one sequence of length ``T`` (self-attention).

    Returns:
        ``(..., T, d_v)``; row ``i`` depends on positions ``0..i`` of ``q``, ``k`` and ``v`` only.

    Raises:
        ValueError: when q, k and v do not have the same length ``T``, or q and k differ in ``d_k``.
    """
    T, d_k = q.shape[-2], q.shape[-1]
    if k.shape[-2] != T or v.shape[-2] != T:
        raise ValueError(f"causal self-attention needs q, k and v of one length T, got "
                         f"{q.shape[-2]}, {k.shape[-2]} and {v.shape[-2]}")
    if k.shape[-1] != d_k:
        raise ValueError(f"q and k must share d_k, got {d_k} and {k.shape[-1]}")
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., T, T)
    weights = masked_softmax(scores, causal_mask(T, device=q.device))  # (..., T, T), zero above the diagonal
    return weights @ v  # (..., T, d_v)
