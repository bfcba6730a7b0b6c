"""Chapter 11, positions and long context: the reference implementations.

In the chapter's order: rotary position embeddings (RoPE) in the interleaved layout of the RoFormer paper and in
the "rotate-half" layout of several code bases, ALiBi's linear distance penalty with the paper's head slopes, the
causal sliding-window mask, kernelised linear attention (non-causal through one (d_k, d_v) summary, causal
through prefix sums, never a (T_q, T_k) tensor), and attention of a decoder with a key/value cache under RoPE,
the fixed version of the chapter's bug hunt.

Positions are bottom-right aligned as in a cache: with ``T_q`` queries and ``T_k`` keys, query ``i`` stands at
absolute position ``T_k - T_q + i``, the last query beside the last key. Masks are ``torch.bool`` with True =
may attend. Every function returns new tensors and leaves its arguments unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

HALF = (torch.float16, torch.bfloat16)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half precisions are computed in float32 and rounded once at the end."""
    return torch.float32 if dtype in HALF else dtype


def rope_angles(positions: torch.Tensor, d: int, base: float = 10000.0) -> torch.Tensor:
    """``(T, d/2)`` float64 angles ``positions[t] * theta_i`` with ``theta_i = base ** (-2i / d)``."""
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,): theta_0 = 1, slower after
    return positions.to(torch.float64)[:, None] * theta[None, :]  # (T, d/2)


def _check_rope(x: torch.Tensor, positions: torch.Tensor) -> None:
    if x.dim() < 2 or x.shape[-1] % 2:
        raise ValueError(f"x must be (..., T, d) with d even, got shape {tuple(x.shape)}")
    if not isinstance(positions, torch.Tensor) or positions.dim() != 1 or positions.is_floating_point():
        raise ValueError("positions must be a 1-D integer tensor, one position per row of x")
    if positions.shape[0] != x.shape[-2]:
        raise ValueError(f"positions has {positions.shape[0]} entries for T={x.shape[-2]} rows of x")


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding of ``x (..., T, d)`` at integer ``positions (T,)``, interleaved layout.

    Each pair of features ``(x[..., t, 2i], x[..., t, 2i + 1])`` is rotated by the angle
    ``positions[t] * base ** (-2i / d)``:  ``(a, b) -> (a cos - b sin, a sin + b cos)``. Then the dot product
    of a query rotated at ``m`` and a key rotated at ``n`` depends on the positions only through ``m - n``.

    The frequencies and the angles are computed in float64 (:func:`rope_angles`), their cosines and sines then
    converted: a float32 angle of 32768 radians is stored only to within about 2e-3.

    Returns:
        A tensor of ``x``'s shape and dtype (half precisions are computed in float32).

    Raises:
        ValueError: when ``d`` is odd or ``positions`` is not a 1-D integer tensor of length ``T``.
    """
    _check_rope(x, positions)
    angles = rope_angles(positions.to(x.device), x.shape[-1], base)  # (T, d/2)
    work = _compute_dtype(x.dtype)
    cos, sin = angles.cos().to(work), angles.sin().to(work)  # (T, d/2)
    a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)  # (..., T, d/2): even and odd features
    out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1)  # (..., T, d/2, 2)
    return out.flatten(-2).to(x.dtype)  # (..., T, d): pairs back in place


def apply_rope_half(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE in the "rotate-half" layout (GPT-NeoX, Llama in Hugging Face): feature ``i`` pairs with ``i + d/2``.

    Same angles as :func:`apply_rope`; ``apply_rope(x) == unpermute(apply_rope_half(permute(x)))`` for the fixed
    permutation :func:`half_to_interleaved` undoes.
    """
    _check_rope(x, positions)
    angles = rope_angles(positions.to(x.device), x.shape[-1], base)  # (T, d/2)
    work = _compute_dtype(x.dtype)
    cos, sin = angles.cos().to(work), angles.sin().to(work)
    a, b = x.to(work).chunk(2, dim=-1)  # (..., T, d/2) each: first half, second half
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1).to(x.dtype)


def interleaved_to_half(d: int) -> torch.Tensor:
    """Index ``p`` with ``x[..., p]`` in the rotate-half layout when ``x`` is interleaved: evens, then odds."""
    return torch.cat((torch.arange(0, d, 2), torch.arange(1, d, 2)))


def half_to_interleaved(d: int) -> torch.Tensor:
    """The inverse permutation of :func:`interleaved_to_half`."""
    return torch.argsort(interleaved_to_half(d))


# ---------------------------------------------------------------------------------------------------
# ALiBi


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """``(n_heads,)`` float32 slopes of ALiBi (Press et al., 2022).

    For ``n`` a power of two, the geometric sequence ``2 ** (-8 h / n)``, ``h = 1..n``. Otherwise, with ``c``
    the largest power of two below ``n``: the ``c`` slopes of ``c`` heads, then every other slope of ``2c``
    heads (the odd-numbered ones, which lie between them) until there are ``n``.
    """
    if n_heads < 1:
        raise ValueError(f"n_heads must be >= 1, got {n_heads}")

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    c = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = geometric(c) + geometric(2 * c)[0::2][: n_heads - c]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(n_heads: int, T_q: int, T_k: int) -> torch.Tensor:
    """``(n_heads, T_q, T_k)`` float32 ALiBi bias ``-m_h * |p_i - j|``, to be added to the scores.

    ``m_h`` are :func:`alibi_slopes`; ``p_i = T_k - T_q + i`` is query ``i``'s absolute position (bottom-right
    aligned, as when the last ``T_q`` tokens attend to a cache of ``T_k``). The bias is 0 on a query's own
    position and falls by ``m_h`` per step of distance; a causal model masks the future keys besides.

    Raises:
        ValueError: when ``n_heads < 1``, a length is negative, or ``T_q > T_k``.
    """
    if T_q < 0 or T_k < 0 or T_q > T_k:
        raise ValueError(f"need 0 <= T_q <= T_k (queries are the last T_q of T_k positions), got {T_q}, {T_k}")
    slopes = alibi_slopes(n_heads)  # (H,)
    query_pos = torch.arange(T_k - T_q, T_k)  # (T_q,): bottom-right aligned
    distance = (query_pos[:, None] - torch.arange(T_k)[None, :]).abs()  # (T_q, T_k)
    return -slopes[:, None, None] * distance[None].to(torch.float32)  # (H, T_q, T_k)


# ---------------------------------------------------------------------------------------------------
# sliding windows


def sliding_window_mask(T_q: int, T_k: int, window: int) -> torch.Tensor:
    """``(T_q, T_k)`` bool: query ``i`` at ``p_i = T_k - T_q + i`` may attend to keys ``p_i - window < j <= p_i``.

    Causal (bottom-right aligned) and at most ``window`` keys per query, itself included.

    Raises:
        ValueError: when ``window < 1``, a length is negative, or ``T_q > T_k``.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1 (a query sees at least itself), got {window}")
    if T_q < 0 or T_k < 0 or T_q > T_k:
        raise ValueError(f"need 0 <= T_q <= T_k, got {T_q}, {T_k}")
    query_pos = torch.arange(T_k - T_q, T_k)[:, None]  # (T_q, 1)
    key_pos = torch.arange(T_k)[None, :]  # (1, T_k)
    return (key_pos <= query_pos) & (key_pos > query_pos - window)  # (T_q, T_k)


def sliding_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    """Causal self-attention with a sliding window, in ``O(T * window)`` memory (the chapter's blocked band).

    The queries go in blocks of ``w = window``: block ``b`` (positions ``bw .. bw + w - 1``) can only reach the
    ``2w`` keys ``(b - 1)w .. bw + w - 1``, which ``unfold`` gathers as a view of the keys padded by ``w`` in front.
    Each block computes a ``(w, 2w)`` tile of scores under the same band mask, so the largest tensor is the
    ``(..., T/w, w, 2w)`` scores, ``2 T w`` numbers, never ``(..., T, T)`` (nor ``(..., T, w, d)``).
    """
    T, w = q.shape[-2], window
    n_blocks = -(-T // w)
    pad_end = n_blocks * w - T
    q_blocks = F.pad(q, (0, 0, 0, pad_end)).unflatten(-2, (n_blocks, w))  # (..., n, w, d_k)
    k_blocks = F.pad(k, (0, 0, w, pad_end)).unfold(-2, 2 * w, w).transpose(-2, -1)  # (..., n, 2w, d_k): a view
    v_blocks = F.pad(v, (0, 0, w, pad_end)).unfold(-2, 2 * w, w).transpose(-2, -1)  # (..., n, 2w, d_v)
    scores = q_blocks @ k_blocks.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., n, w, 2w)
    r, c = torch.arange(w)[:, None], torch.arange(2 * w)[None, :]  # query bw + r, key (b - 1)w + c
    allowed = (c > r) & (c <= r + w) & ((torch.arange(n_blocks)[:, None, None] > 0) | (c >= w))  # (n, w, 2w)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return (weights @ v_blocks).flatten(-3, -2)[..., :T, :]  # (..., T, d_v)


# ---------------------------------------------------------------------------------------------------
# linear attention


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """``phi(x) = elu(x) + 1``, positive everywhere (Katharopoulos et al., 2020)."""
    return F.elu(x) + 1


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                     eps: float = 1e-6) -> torch.Tensor:
    """Kernelised attention ``phi(Q) phi(K)^T V / (phi(Q) phi(K)^T 1 + eps)`` with ``phi = elu + 1``.

    Non-causal: ``phi(Q) (phi(K)^T V)``, one ``(d_k, d_v)`` summary for all queries. Causal (``T_q == T_k``):
    query ``i`` sums over keys ``j <= i`` through prefix sums of ``phi(k_j) v_j^T`` and ``phi(k_j)``, the state
    of a recurrence. No ``(T_q, T_k)`` tensor is ever built.

    Args:
        q: ``(..., T_q, d_k)``; k: ``(..., T_k, d_k)``; v: ``(..., T_k, d_v)``.
        causal: query ``i`` sees keys ``0..i`` only; needs ``T_q == T_k``.
        eps: added to each normaliser.

    Returns:
        ``(..., T_q, d_v)`` in the inputs' dtype (half precisions are computed in float32).

    Raises:
        ValueError: when ``causal`` and ``T_q != T_k``, or the shapes do not fit.
    """
    if k.shape[-1] != q.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v) do not fit: "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError(f"causal linear attention needs T_q == T_k, got {q.shape[-2]} and {k.shape[-2]}")
    work = _compute_dtype(q.dtype)
    fq, fk, v_ = elu_feature_map(q.to(work)), elu_feature_map(k.to(work)), v.to(work)
    if not causal:
        kv = fk.transpose(-2, -1) @ v_  # (..., d_k, d_v)
        z = fk.sum(dim=-2)  # (..., d_k)
        num = fq @ kv  # (..., T_q, d_v)
        den = (fq * z[..., None, :]).sum(-1, keepdim=True)  # (..., T_q, 1)
    else:
        kv = torch.cumsum(fk[..., :, None] * v_[..., None, :], dim=-3)  # (..., T, d_k, d_v): prefix states
        z = torch.cumsum(fk, dim=-2)  # (..., T, d_k)
        num = (fq[..., None, :] @ kv).squeeze(-2)  # (..., T, d_v)
        den = (fq * z).sum(-1, keepdim=True)  # (..., T, 1)
    return (num / (den + eps)).to(q.dtype)


# ---------------------------------------------------------------------------------------------------
# the bug hunt: attention with a key/value cache under RoPE


def _rotate_interleaved(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """The rotation of :func:`apply_rope`, written again so that the bug hunt's answer stands on its own (its
    cell is graded without the other exercises): pairs ``(2i, 2i + 1)`` turned by ``positions * base^(-2i/d)``,
    angles in float64, half precisions computed in float32."""
    d = x.shape[-1]
    if x.dim() < 2 or d % 2:
        raise ValueError(f"q and k must be (..., T, d) with d even, got shape {tuple(x.shape)}")
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angles = positions.to(torch.float64)[:, None] * theta[None, :].to(positions.device)  # (T, d/2)
    work = _compute_dtype(x.dtype)
    cos, sin = angles.cos().to(work), angles.sin().to(work)
    a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2).to(x.dtype)


def rope_cached_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                          v_cache: torch.Tensor, base: float = 10000.0
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of a decoder with a cache: the new tokens attend to the cached ones and to each other.

    Args:
        q, k: ``(..., T_new, d)`` the new tokens' queries and keys, not yet rotated; v: ``(..., T_new, d_v)``.
        k_cache: ``(..., T_past, d)`` keys of the earlier tokens, already rotated at positions 0..T_past-1;
            v_cache: ``(..., T_past, d_v)``. ``T_past`` may be 0 (the prompt).
        base: RoPE's base.

    Returns:
        ``(out (..., T_new, d_v), k_cache (..., T_past + T_new, d), v_cache (..., T_past + T_new, d_v))``:
        the new tokens stand at absolute positions ``T_past .. T_past + T_new - 1``; ``q`` and ``k`` are rotated
        there (interleaved layout), new token ``t`` attends causally to every cached key and to new keys
        ``<= t`` with scale ``1/sqrt(d)``; the caches come back extended by the rotated keys and the values.
    """
    T_past, T_new = k_cache.shape[-2], q.shape[-2]
    positions = torch.arange(T_past, T_past + T_new, device=q.device)  # absolute, not 0..T_new-1
    k_all = torch.cat((k_cache, _rotate_interleaved(k, positions, base)), dim=-2)  # (..., T_past + T_new, d)
    v_all = torch.cat((v_cache, v), dim=-2)
    q_rot = _rotate_interleaved(q, positions, base)
    # bottom-right causal: new token t (at T_past + t) sees keys j <= T_past + t
    mask = torch.ones(T_new, T_past + T_new, dtype=torch.bool, device=q.device).tril(diagonal=T_past)
    scores = q_rot @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_new, T_past + T_new)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return weights @ v_all, k_all, v_all
