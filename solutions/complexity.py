"""Chapter 8, the O(T²) cost: the reference implementations.

Read top to bottom, in the chapter's order: count the floating-point operations of attention; count the
bytes of one attention matrix; count the FLOPs of a simple RNN for comparison; fit the exponent of a
power law on a log-log plot; compute exact attention in query chunks so that only ``chunk_size x T_k``
scores exist at any time.

Counting conventions: one multiply-add is **2 FLOPs** (a multiplication and an addition), so a matrix
product ``(m, n) @ (n, p)`` costs ``2 m n p``. Only the two matrix products of attention are counted
(``q k^T`` and ``weights @ v``); the softmax, the scaling and the mask are ``O(T^2)`` too but with a
constant of a few operations per score, not ``d_k``, and the projections are ``O(T d^2)`` like an RNN's.
All counters return exact Python ``int``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from solutions._common import check_mask


def _check_count(name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


def attention_flops(T: int, d_k: int, d_v: int | None = None, batch: int = 1, heads: int = 1,
                    causal: bool = False) -> int:
    """FLOPs of the two matrix products of self-attention over ``T`` tokens.

    ``q k^T`` is ``(T, d_k) @ (d_k, T)``: ``T^2`` scores of ``d_k`` multiply-adds each, ``2 T^2 d_k``
    FLOPs; ``weights @ v`` is ``(T, T) @ (T, d_v)``: ``2 T^2 d_v`` FLOPs. With a causal mask only the
    ``P = T (T + 1) / 2`` pairs with ``j <= i`` (the diagonal included) need computing, as a kernel that
    skips the masked blocks does. In total::

        2 * batch * heads * P * (d_k + d_v),   P = T^2, or T (T + 1) / 2 when causal

    Args:
        T: sequence length (queries = keys = T).
        d_k: query/key width per head; ``d_v``: value width per head, defaults to ``d_k``.
        batch, heads: the count is per head and per sequence, times both.
        causal: count only the pairs a causal mask keeps.

    Returns:
        The exact count as a Python ``int``.

    Raises:
        ValueError: on a negative ``T``, or widths, batch or heads below 1.
    """
    d_v = d_k if d_v is None else d_v
    _check_count("T", T, 0)
    for name, value in (("d_k", d_k), ("d_v", d_v), ("batch", batch), ("heads", heads)):
        _check_count(name, value, 1)
    T, d_k, d_v, batch, heads = int(T), int(d_k), int(d_v), int(batch), int(heads)
    pairs = T * (T + 1) // 2 if causal else T * T  # T (T+1) is even: the division is exact
    return 2 * batch * heads * pairs * (d_k + d_v)


def attention_matrix_bytes(T: int, batch: int = 1, heads: int = 1, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of the ``(batch, heads, T, T)`` attention matrix (scores or weights) stored in ``dtype``.

    ``batch * heads * T^2 * bytes per element``, with the element size taken from ``dtype`` itself
    (4 for float32, 2 for bfloat16/float16, 8 for float64, 1 for bool/int8). One matrix only: the
    scores and the softmax weights, when both are kept, are two of them.

    Returns:
        The exact count as a Python ``int``.

    Raises:
        TypeError: when ``dtype`` is not a ``torch.dtype``.
        ValueError: on a negative ``T`` or ``batch``/``heads`` below 1.
    """
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    _check_count("T", T, 0)
    _check_count("batch", batch, 1)
    _check_count("heads", heads, 1)
    return int(batch) * int(heads) * int(T) * int(T) * dtype.itemsize


def rnn_flops(T: int, d: int, batch: int = 1) -> int:
    """FLOPs of a simple RNN ``h_t = tanh(x_t W_xh + h_{t-1} W_hh + b)`` with input and hidden width ``d``.

    Each step multiplies a ``d``-vector by two ``(d, d)`` matrices: ``2 * 2 d^2`` FLOPs. The additions
    and ``tanh`` are ``O(d)`` per step and not counted. Over ``T`` steps::

        4 * batch * T * d^2

    Returns:
        The exact count as a Python ``int``.

    Raises:
        ValueError: on a negative ``T`` or ``d``/``batch`` below 1.
    """
    _check_count("T", T, 0)
    _check_count("d", d, 1)
    _check_count("batch", batch, 1)
    return 4 * int(batch) * int(T) * int(d) * int(d)


def loglog_slope(xs: Sequence[float] | np.ndarray | torch.Tensor,
                 ys: Sequence[float] | np.ndarray | torch.Tensor) -> float:
    """Least-squares slope of ``log y`` against ``log x``: the exponent ``p`` of a power law ``y ~ c x^p``.

    Fits ``log y = p log x + log c`` by ordinary least squares (every point weighs the same), so the
    answer is ``cov(log x, log y) / var(log x)``. The base of the logarithm does not matter: it scales
    both axes by the same factor.

    Args:
        xs, ys: equally long 1-D sequences, numpy arrays or tensors of positive numbers.

    Returns:
        The slope as a Python ``float``.

    Raises:
        ValueError: when the lengths differ, there are fewer than 2 points, a value is not positive or
            not finite, or all ``xs`` are equal (no slope to fit).
    """
    x = np.asarray(xs.detach().cpu() if isinstance(xs, torch.Tensor) else xs, dtype=np.float64)
    y = np.asarray(ys.detach().cpu() if isinstance(ys, torch.Tensor) else ys, dtype=np.float64)
    if x.ndim != 1 or y.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"xs and ys must be 1-D and equally long, got shapes {x.shape} and {y.shape}")
    if x.size < 2:
        raise ValueError(f"need at least 2 points to fit a slope, got {x.size}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()) or (x <= 0).any() or (y <= 0).any():
        raise ValueError("xs and ys must be finite and positive: a log-log fit takes their logarithms")
    lx, ly = np.log(x), np.log(y)
    lx_c = lx - lx.mean()
    var = float(lx_c @ lx_c)
    if var == 0.0:
        raise ValueError("all xs are equal: the slope is undefined")
    return float(lx_c @ (ly - ly.mean())) / var


def chunked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk_size: int,
                      mask: torch.Tensor | None = None) -> torch.Tensor:
    """Exact ``softmax(q k^T / sqrt(d_k)) v``, computed ``chunk_size`` queries at a time.

    Every query row's softmax needs all of its ``T_k`` scores but no other row's, so the queries can be
    cut into chunks of ``chunk_size`` rows: each chunk builds its ``(..., chunk_size, T_k)`` scores,
    normalises them and multiplies by ``v``, and the scores are freed before the next chunk. The result
    is the same as the full computation (up to rounding); the memory for scores falls from
    ``T_q * T_k`` to ``chunk_size * T_k`` per head, the FLOPs stay the same.

    Args:
        q: queries ``(..., T_q, d_k)``; ``T_q`` need not be a multiple of ``chunk_size``: the last chunk
            is shorter.
        k: keys ``(..., T_k, d_k)``; v: values ``(..., T_k, d_v)``. Leading dims broadcast as in ``@``.
        chunk_size: number of query rows per chunk, >= 1.
        mask: optional bool tensor broadcastable to the scores ``(..., T_q, T_k)``; True means the query
            may attend to the key. A query row whose keys are all masked gets an output of **zeros**
            (there is no distribution to average with; zeros, like chapter 4's ``masked_softmax``,
            rather than NaN).

    Returns:
        Only the output ``(..., T_q, d_v)`` -- returning the weights would bring back the
        ``(T_q, T_k)`` matrix this function exists to avoid.

    Raises:
        TypeError: when ``mask`` is not a bool tensor.
        ValueError: when ``chunk_size`` < 1, q and k differ in ``d_k``, k and v differ in ``T_k``, or
            the mask does not broadcast to the scores.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an int >= 1, got {chunk_size!r}")
    d_k, T_q, T_k = q.shape[-1], q.shape[-2], k.shape[-2]
    if k.shape[-1] != d_k:
        raise ValueError(f"q and k must share d_k, got {d_k} and {k.shape[-1]}")
    if v.shape[-2] != T_k:
        raise ValueError(f"k and v must have one row per key, got T_k={T_k} and {v.shape[-2]}")
    # numpy's broadcast_shapes: torch's imports its symbolic-shape machinery on first use (~70 MB)
    lead = np.broadcast_shapes(tuple(q.shape[:-2]), tuple(k.shape[:-2]))
    scores_shape = (*lead, T_q, T_k)
    if mask is not None:
        check_mask(mask, scores_shape)
    scale = 1.0 / math.sqrt(d_k)
    k_t = k.transpose(-2, -1)  # (..., d_k, T_k), a view
    chunks = []
    for start in range(0, T_q, chunk_size):
        stop = min(start + chunk_size, T_q)  # the last chunk may be shorter
        s = (q[..., start:stop, :] @ k_t) * scale  # (..., c, T_k): the only scores alive
        if mask is not None:
            # a mask with one query row (padding) applies to every chunk; otherwise take this chunk's rows
            m = mask if mask.dim() < 2 or mask.shape[-2] == 1 else mask[..., start:stop, :]
            s = s.masked_fill(~m, float("-inf"))
        row_max = s.amax(dim=-1, keepdim=True)  # (..., c, 1)
        # a fully masked row has max -inf; use 0 so that exp gives 0 there instead of NaN
        row_max = row_max.masked_fill(row_max == float("-inf"), 0.0)
        e = (s - row_max).exp()  # (..., c, T_k)
        total = e.sum(dim=-1, keepdim=True)  # (..., c, 1), >= 1 unless the row is fully masked
        total = total.masked_fill(total == 0, 1.0)  # fully masked row: 0 / 1 = 0 output
        chunks.append((e @ v) / total)  # (..., c, d_v)
    if not chunks:  # T_q == 0
        out_lead = np.broadcast_shapes(lead, tuple(v.shape[:-2]))
        return q.new_zeros((*out_lead, 0, v.shape[-1]))
    return torch.cat(chunks, dim=-2)  # (..., T_q, d_v)
