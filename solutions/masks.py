"""Chapter 4, masks: the reference implementations.

In the chapter's order: the causal mask of a decoder, the padding mask of a batch of sequences of
different lengths (padded on the right or on the left), their combination in the ``(B, 1, T, T)`` layout
that broadcasts over heads (with no query row left empty, which left padding with a causal mask would
cause), the document mask of a packed row of several documents, a softmax that gives fully masked rows
zeros instead of NaN (in the forward and the backward pass), and causal self-attention, the fixed version
of the chapter's bug hunt.

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


SIDES = ("right", "left")


def padding_mask(lengths: torch.Tensor, T: int, side: str = "right") -> torch.Tensor:
    """``(B, T)`` bool, True at the real tokens, False at the padding.

    ``side="right"`` (real tokens first): ``m[b, j] = j < lengths[b]``; ``side="left"`` (padding first,
    real tokens at the end, the layout of batched generation): ``m[b, j] = j >= T - lengths[b]``.

    Args:
        lengths: ``(B,)`` integer tensor (any integer dtype, uint8 and int8 too: ``T - lengths`` is computed in
            int64, where it cannot wrap around), each length in ``0..T``.
        T: the padded length.
        side: which side of each sequence holds the padding.

    Returns:
        A ``(B, T)`` bool tensor on ``lengths.device``.

    Raises:
        ValueError: when ``lengths`` is not a 1-D integer tensor, a length is outside ``0..T``, or
            ``side`` is neither ``"right"`` nor ``"left"``.
    """
    if side not in SIDES:
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    if not isinstance(lengths, torch.Tensor) or lengths.dim() != 1 or lengths.is_floating_point() \
            or lengths.dtype == torch.bool:
        raise ValueError("lengths must be a 1-D integer tensor (one length per sequence)")
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > T):
        raise ValueError(f"every length must lie in 0..T={T}, got {lengths.tolist()}")
    positions = torch.arange(T, device=lengths.device)  # (T,)
    lengths = lengths.long()
    if side == "right":
        return positions[None, :] < lengths[:, None]  # (B, T)
    return positions[None, :] >= T - lengths[:, None]  # (B, T)


def attention_mask(lengths: torch.Tensor, T: int, causal: bool = False, side: str = "right") -> torch.Tensor:
    """``(B, 1, T, T)`` bool: keys are masked, queries are not, and no query row is left empty.

    ``m[b, 0, i, j] = real[b, j]`` (and ``j <= i`` when ``causal``), with ``real = padding_mask(lengths,
    T, side)``. A padded query row still sees the real keys it may see (its output is ignored later, by
    the loss). A row that would have **no** key at all (with ``side="left"`` and ``causal=True``, the
    leading padded queries ``i < T - lengths[b]``; every row of a sequence of length 0) may attend to its
    own position ``j = i`` only: its output is then garbage that the loss ignores, but never NaN, with any
    softmax. The singleton axis 1 broadcasts over attention heads ``(B, H, T, T)``.
    """
    keys = padding_mask(lengths, T, side)[:, None, None, :]  # (B, 1, 1, T): the same keys for every query
    allowed = causal_mask(T, device=lengths.device) if causal else torch.ones(
        T, T, dtype=torch.bool, device=lengths.device)  # (T, T)
    mask = keys & allowed  # (B, 1, T, T)
    empty = ~mask.any(dim=-1, keepdim=True)  # (B, 1, T, 1): rows without any key
    diagonal = torch.eye(T, dtype=torch.bool, device=lengths.device)  # (T, T)
    return mask | (empty & diagonal)  # (B, 1, T, T)


def document_mask(doc_ids: torch.Tensor, causal: bool = True,
                  positions: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``(B, 1, T, T)`` bool mask of packed rows: ``m[b, 0, i, j] = doc_ids[b, i] == doc_ids[b, j]`` (and
    ``j <= i`` when ``causal``); with ``positions=True`` also each token's position within its document.

    A packed training row concatenates several documents; token ``i`` may attend only to tokens of its own
    document. Documents are told apart by their id alone: ids need not be contiguous runs, sorted or
    start at 0 (two tokens with the same id belong to one document wherever they stand; any integer is an
    id, negative ones too, e.g. -1 for padding, which then forms a document of its own). For the usual
    layout, contiguous runs, the mask is block-diagonal with a causal triangle in each block. Every row
    keeps its diagonal, so no row is empty.

    ``positions=True`` returns ``(mask, pos)``, ``pos`` a ``(B, T)`` int64 tensor: ``pos[b, i]`` is the number of
    tokens ``j < i`` of the same document, so every document counts 0, 1, 2, ... as if it stood alone (whatever
    ``causal`` is). It is the row sum of the strictly causal same-document mask: not a count since the last id
    change, which is wrong for ids that are not contiguous runs.

    Raises:
        ValueError: when ``doc_ids`` is not a 2-D integer tensor ``(B, T)``.
    """
    if not isinstance(doc_ids, torch.Tensor) or doc_ids.dim() != 2 or doc_ids.is_floating_point() \
            or doc_ids.is_complex() or doc_ids.dtype == torch.bool:
        raise ValueError("doc_ids must be a (B, T) integer tensor (one document id per token)")
    T = doc_ids.shape[-1]
    same = doc_ids[:, None, :, None] == doc_ids[:, None, None, :]  # (B, 1, T, T): query i, key j
    mask = same & causal_mask(T, device=doc_ids.device) if causal else same
    if not positions:
        return mask
    earlier = torch.ones(T, T, dtype=torch.bool, device=doc_ids.device).tril(-1)  # j < i
    pos = (same[:, 0] & earlier).sum(dim=-1)  # (B, T) int64: earlier tokens of the same document
    return mask, pos


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
