"""Chapter 10, generating text: the reference implementations.

In the chapter's order: the causal mask of the newest ``T_q`` queries of a sequence of ``T_k`` tokens
(aligned bottom-right), one decoding step over a key-value cache, grouped-query attention (multi-head and
multi-query attention as its two ends), the bytes a KV cache takes, split-KV attention (FlashDecoding's
exact combination of partial attentions by their log-sum-exp), and the fixed version of the chapter's bug
hunt, attention of new tokens over a cache that already holds them.

Conventions as everywhere in the course: shapes ``(..., T, d)``, boolean masks with True = may attend,
new tensors returned and inputs left unchanged. Low-precision inputs (float16, bfloat16) are computed in
float32 and the result is returned in the input's dtype, as PyTorch's own attention kernels do.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for the half-precision types, the dtype itself otherwise (float32, float64)."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def bottom_right_causal_mask(T_q: int, T_k: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``(T_q, T_k)`` bool: the causal mask of the ``T_q`` newest queries of a sequence of ``T_k`` tokens.

    Query ``i`` sits at absolute position ``T_k - T_q + i`` and may attend to keys ``j <= T_k - T_q + i``:
    the last query sees every key, and with ``T_q == T_k`` it is the usual lower triangle.

    Raises:
        ValueError: when ``T_q > T_k`` (a query would have no past) or a length is negative.
    """
    if T_q < 0 or T_k < 0:
        raise ValueError(f"lengths must be >= 0, got T_q={T_q}, T_k={T_k}")
    if T_q > T_k:
        raise ValueError(f"T_q={T_q} new queries cannot be the newest of T_k={T_k} tokens: T_q must be <= T_k")
    rows = torch.arange(T_q, device=device)[:, None] + (T_k - T_q)  # (T_q, 1): absolute query positions
    return torch.arange(T_k, device=device)[None, :] <= rows  # (T_q, T_k)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d_k) | mask) v``, computed in float32 for half-precision inputs."""
    dtype, compute = q.dtype, _compute_dtype(q.dtype)
    q, k, v = q.to(compute), k.to(compute), v.to(compute)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v).to(dtype)  # (..., T_q, d_v)


def _causal_over_cache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Bottom-right causal attention of the ``T_q`` newest queries over ``T_k`` keys that end with them: what
    :func:`decode_step` and :class:`GroupedQueryAttention` compute, without calling :func:`cached_attention`, the
    exercise after them (a notebook run top to bottom has not defined it yet)."""
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have one length, got {k.shape[-2]} and {v.shape[-2]}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share d_k, got {q.shape[-1]} and {k.shape[-1]}")
    mask = bottom_right_causal_mask(q.shape[-2], k.shape[-2], device=q.device)  # (T_q, T_k)
    return _attend(q, k, v, mask)


def cached_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention of the ``T_q`` newest tokens over a cache of ``T_k`` tokens that ends with them.

    Args:
        q: ``(..., T_q, d_k)``, the queries of the newest ``T_q`` tokens.
        k: ``(..., T_k, d_k)``, v: ``(..., T_k, d_v)``, every token so far, the newest ``T_q`` last.

    Returns:
        ``(..., T_q, d_v)``: row ``i`` equals row ``T_k - T_q + i`` of causal self-attention over the
        whole sequence (bottom-right alignment; ``is_causal=True`` would align top-left).

    Raises:
        ValueError: when ``T_q > T_k``, or ``k`` and ``v`` differ in length, or ``q`` and ``k`` in ``d_k``.
    """
    return _causal_over_cache(q, k, v)


def decode_step(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One step of cached decoding: the new tokens attend to the cache and, causally, to each other.

    Args:
        q, k_new: ``(..., T_new, d_k)``; v_new: ``(..., T_new, d_v)``: the new tokens' projections.
        past: ``(k_past, v_past)`` of shapes ``(..., T_past, d_k)`` and ``(..., T_past, d_v)``, or None
            (no cache yet, the same as ``T_past = 0``).

    Returns:
        ``(out, present)``: ``out`` is ``(..., T_new, d_v)``; ``present = (k_all, v_all)`` is the cache
        with the new tokens appended along the length axis (``-2``), ``(..., T_past + T_new, d)``. Feeding
        a sequence in chunks of any sizes, each step given the previous step's ``present``, gives the rows
        of causal self-attention over the whole sequence.
    """
    if past is None:
        k_all, v_all = k_new, v_new
    else:
        k_past, v_past = past
        k_all = torch.cat([k_past, k_new], dim=-2)  # (..., T_past + T_new, d_k): the new tokens last
        v_all = torch.cat([v_past, v_new], dim=-2)
    if past is None:  # present must be a new tensor, not the caller's k_new
        k_all, v_all = k_all.clone(), v_all.clone()
    return _causal_over_cache(q, k_all, v_all), (k_all, v_all)


class GroupedQueryAttention(nn.Module):
    """Causal self-attention in which each group of ``n_heads // n_kv_heads`` query heads shares one
    key/value head; ``n_kv_heads == n_heads`` is multi-head attention, ``n_kv_heads == 1`` multi-query.

    Submodules: ``q_proj = Linear(d_model, d_model)``, ``k_proj`` and ``v_proj = Linear(d_model,
    n_kv_heads * d_head)``, ``out_proj = Linear(d_model, d_model)``, with ``d_head = d_model // n_heads``.
    Query head ``i`` uses key/value head ``i // (n_heads // n_kv_heads)``.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, bias: bool = False):
        super().__init__()
        if n_heads < 1 or n_kv_heads < 1 or d_model % n_heads:
            raise ValueError(f"n_heads={n_heads} must be >= 1 and divide d_model={d_model}")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``x``: ``(B, T, d_model)``; ``past``: ``(k, v)`` each ``(B, n_kv_heads, T_past, d_head)`` or None.

        Returns ``(out (B, T, d_model), present)`` with ``present = (k, v)`` each
        ``(B, n_kv_heads, T_past + T, d_head)``: the projected keys and values, not repeated per query head.
        """
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, h, T, d_head)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, h_kv, T, d_head)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.d_head).transpose(1, 2)
        if past is not None:
            k = torch.cat([past[0], k], dim=-2)  # (B, h_kv, T_past + T, d_head)
            v = torch.cat([past[1], v], dim=-2)
        group = self.n_heads // self.n_kv_heads
        # query head i reads kv head i // group: each kv head repeated `group` times in a row
        k_rep = k.repeat_interleave(group, dim=1)  # (B, h, T_total, d_head)
        v_rep = v.repeat_interleave(group, dim=1)
        out = _causal_over_cache(q, k_rep, v_rep)  # (B, h, T, d_head)
        out = out.transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, d_model)
        return self.out_proj(out), (k, v)


#: Bits per value of the packed sub-byte types, whose ``itemsize`` (1) is a byte per element: ``uint1``..``uint7``
#: and ``int1``..``int7`` (N bits), the quantised ``quint4x2`` and ``quint2x4`` (two or four values a byte), and
#: ``float4_e2m1fn_x2`` (one element of it holds two 4-bit values). Every other dtype: ``8 * itemsize`` (the raw
#: ``bits*`` containers included: they hold bits, not values).
SUB_BYTE_BITS: dict[torch.dtype, int] = {
    **{getattr(torch, f"{kind}{n}"): n for kind in ("uint", "int") for n in range(1, 8)
       if hasattr(torch, f"{kind}{n}")},
    **{getattr(torch, name): bits for name, bits in (("quint4x2", 4), ("quint2x4", 2), ("float4_e2m1fn_x2", 4))
       if hasattr(torch, name)},
}


def dtype_bits(dtype: torch.dtype) -> int:
    """Bits one value of ``dtype`` takes: :data:`SUB_BYTE_BITS` for the packed types, ``8 * itemsize`` otherwise."""
    return SUB_BYTE_BITS.get(dtype, 8 * dtype.itemsize)


def kv_cache_bytes(n_layers: int, n_kv_heads: int, d_head: int, seq_len: int, batch: int = 1,
                   dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes of a KV cache: ``2 * n_layers * n_kv_heads * d_head * seq_len * batch * element size``.

    The 2 counts keys and values; every layer caches both, for every kv head and every token. The element size
    is the dtype's bits per value over 8 (:func:`dtype_bits`): a packed 4-bit cache (``torch.uint4``,
    ``torch.int4``, ``torch.float4_e2m1fn_x2``, ...) takes half a byte per value, although ``itemsize`` says 1;
    the total is rounded up to whole bytes. The scales of a quantised cache are not counted.

    Raises:
        ValueError: when a count is negative.
        TypeError: when ``dtype`` is not a ``torch.dtype``.
    """
    counts = {"n_layers": n_layers, "n_kv_heads": n_kv_heads, "d_head": d_head, "seq_len": seq_len,
              "batch": batch}
    for name, value in counts.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    bits = 2 * n_layers * n_kv_heads * d_head * seq_len * batch * dtype_bits(dtype)  # exact Python ints
    return -(-bits // 8)  # whole bytes, rounded up


def split_kv_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n_splits: int) -> torch.Tensor:
    """Exact (non-causal) attention of ``q`` over ``k, v``, computed split by split (FlashDecoding).

    The keys are cut into ``n_splits`` contiguous chunks of ``ceil(T_k / n_splits)`` keys (the last may be
    shorter; with ``n_splits > T_k`` some chunks are empty and skipped). Each chunk gives its partial output
    ``o_s = softmax(s_chunk) v_chunk`` and log-sum-exp ``l_s``; they combine exactly as
    ``sum_s exp(l_s - L) o_s`` with ``L = logsumexp_s l_s``. No tensor holds more than one chunk's scores.

    Args:
        q: ``(..., T_q, d_k)``; k: ``(..., T_k, d_k)``; v: ``(..., T_k, d_v)``, ``T_k >= 1``.
        n_splits: the number of chunks, ``>= 1``.

    Returns:
        ``(..., T_q, d_v)`` in ``q``'s dtype.

    Raises:
        ValueError: when ``n_splits < 1``, ``T_k == 0``, or the shapes do not fit.
    """
    if n_splits < 1:
        raise ValueError(f"n_splits must be >= 1, got {n_splits}")
    T_k = k.shape[-2]
    if T_k == 0 or v.shape[-2] != T_k:
        raise ValueError(f"need T_k >= 1 keys and as many values, got {T_k} and {v.shape[-2]}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share d_k, got {q.shape[-1]} and {k.shape[-1]}")
    dtype, compute = q.dtype, _compute_dtype(q.dtype)
    chunk = -(-T_k // n_splits)  # ceil(T_k / n_splits)
    q = q.to(compute) / math.sqrt(q.shape[-1])
    outs, lses = [], []
    for start in range(0, T_k, chunk):  # the partial attentions are independent: one GPU block each
        k_c = k[..., start:start + chunk, :].to(compute)  # (..., c, d_k)
        v_c = v[..., start:start + chunk, :].to(compute)  # (..., c, d_v)
        s = q @ k_c.transpose(-2, -1)  # (..., T_q, c): one chunk's scores only
        lse = torch.logsumexp(s, dim=-1, keepdim=True)  # (..., T_q, 1)
        outs.append(torch.exp(s - lse) @ v_c)  # (..., T_q, d_v): this chunk's softmax, normalised
        lses.append(lse)
    lse_all = torch.stack(lses)  # (n, ..., T_q, 1)
    weights = torch.exp(lse_all - torch.logsumexp(lse_all, dim=0, keepdim=True))  # (n, ..., T_q, 1), sum 1
    return (weights * torch.stack(outs)).sum(dim=0).to(dtype)  # (..., T_q, d_v)
