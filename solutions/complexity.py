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


def _check_size(name: str, value: int, minimum: int) -> int:
    """``value`` as a Python int: ints and numpy integers (not bool) of at least ``minimum``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


#: Bytes per element of the row statistics a tiled kernel keeps (logsumexp L, and D = rowsum(dO * O) in
#: the backward pass): float32 whatever the dtype of the tensors, as FlashAttention does.
STAT_BYTES = 4


def _tiles(T: int, block_q: int, block_k: int, causal: bool) -> tuple[int, int, int]:
    """``(pairs, rows, cols)`` summed over the tiles a tiled kernel computes: ``Σ rows * cols``, ``Σ rows``,
    ``Σ cols``. Causal: tile (i, j) is computed when its first key is at most its query block's last row
    (it holds at least one pair j' <= i'); the tiles on the diagonal are computed whole. One pass over the
    query blocks: block [a, b) meets the key blocks 0 .. (b - 1) // block_k, that is min(T, that * block_k)
    keys."""
    pairs = rows = cols = 0
    n_kb = -(-T // block_k)  # ceil(T / block_k)
    for a in range(0, T, block_q):
        b = min(a + block_q, T)
        kb = (b - 1) // block_k + 1 if causal else n_kb  # key blocks this query block meets
        keys = min(T, kb * block_k)
        pairs += (b - a) * keys
        rows += (b - a) * kb
        cols += keys
    return pairs, rows, cols


def attention_cost(T: int, d: int, heads: int = 1, batch: int = 1, dtype: torch.dtype = torch.bfloat16,
                   kind: str = "standard", block_q: int = 128, block_k: int = 128, causal: bool = False,
                   backward: bool = False) -> dict[str, int]:
    """FLOPs and HBM traffic (bytes) of one attention call: self-attention over ``T`` tokens, head width
    ``d`` (queries, keys and values alike), ``batch * heads`` independent heads, tensors in ``dtype``.

    FLOPs: matrix products only, 2 per multiply-add (``(m, n) @ (n, p)`` is ``2 m n p``); the softmax,
    scaling and masking are not counted. Bytes: every element a kernel reads from or writes to HBM,
    ``dtype.itemsize`` bytes each (any ``torch.dtype``), the row statistics ``STAT_BYTES`` = 4 each.
    Per head, with ``E = dtype.itemsize``:

    ``kind="standard"`` (three kernels, every score computed, a causal mask fused into the softmax, so
    ``causal`` changes nothing; block sizes unused):

    - forward: S = Q K^T (read Q, K; write S), P = softmax(S) (read S; write P), O = P V (read P, V;
      write O): ``4 T^2 d`` FLOPs, ``(4 T d + 4 T^2) E`` bytes;
    - backward (the forward's P is read, nothing recomputed): dV = P^T dO, dP = dO V^T,
      dS = P * (dP - rowsum(dP * P)) (read P, dP; write dS), dQ = dS K, dK = dS^T Q:
      ``8 T^2 d`` FLOPs, ``(8 T d + 7 T^2) E`` bytes.

    ``kind="flash"`` (tiles of ``block_q`` queries by ``block_k`` keys on chip; causal: a tile is computed
    when its first key is at most the last query of its block, whole; ``R`` = the pairs of the computed
    tiles, ``Σ rows * cols``; ``T^2`` without a mask):

    - forward (outer loop over query blocks): Q read once, each computed tile reads its K and V block,
      O written once, one logsumexp per row: ``4 R d`` FLOPs,
      ``(2 T d + 2 d Σ_tiles cols) E + 4 T`` bytes (non-causal: ``Σ cols = ceil(T / block_q) T``);
    - backward (outer loop over key blocks, the scores recomputed): D = rowsum(dO * O) (read O, dO;
      write D), then K, V read and dK, dV written once, and each computed tile reads Q, dO, L, D of its
      query block and reads and writes its dQ rows (accumulation): ``10 R d`` FLOPs,
      ``(6 T d + 4 d Σ_tiles rows) E + 4 T + 8 Σ_tiles rows`` bytes.

    Returns:
        ``{"flops": int, "hbm_bytes": int}``, exact Python ints (no float, no fixed-width integer: counts
        pass 2^63).

    Raises:
        TypeError: when a size is not an int (numpy integers are ints, bools are not), dtype not a
            ``torch.dtype``, or causal/backward not bools.
        ValueError: when ``T`` < 0, ``d``, ``heads``, ``batch``, ``block_q`` or ``block_k`` < 1, or
            ``kind`` is neither "standard" nor "flash".
    """
    T = _check_size("T", T, 0)
    d, heads, batch = _check_size("d", d, 1), _check_size("heads", heads, 1), _check_size("batch", batch, 1)
    block_q, block_k = _check_size("block_q", block_q, 1), _check_size("block_k", block_k, 1)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    for name, flag in (("causal", causal), ("backward", backward)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    if kind not in ("standard", "flash"):
        raise ValueError(f'kind must be "standard" or "flash", got {kind!r}')
    E, n = dtype.itemsize, batch * heads
    if kind == "standard":
        if backward:
            flops, elements = 8 * T * T * d, 8 * T * d + 7 * T * T
        else:
            flops, elements = 4 * T * T * d, 4 * T * d + 4 * T * T
        return {"flops": n * flops, "hbm_bytes": n * elements * E}
    pairs, rows, cols = _tiles(T, block_q, block_k, causal)
    if backward:
        flops = 10 * pairs * d
        nbytes = (6 * T * d + 4 * d * rows) * E + STAT_BYTES * T + 2 * STAT_BYTES * rows
    else:
        flops = 4 * pairs * d
        nbytes = (2 * T * d + 2 * d * cols) * E + STAT_BYTES * T
    return {"flops": n * flops, "hbm_bytes": n * nbytes}


def roofline_time(flops: int | float, hbm_bytes: int | float, peak_flops: float, bandwidth: float) -> float:
    """The roofline model's time of a kernel: it cannot finish before its arithmetic at ``peak_flops``
    (FLOP/s), nor before its traffic at ``bandwidth`` (B/s), and overlaps the two perfectly::

        max(flops / peak_flops, hbm_bytes / bandwidth)   seconds

    Every value is taken as a Python float (float64) first, whatever its type: numpy float32 scalars are not
    divided in float32 (which rounds to 7 digits and overflows past 3.4e38). A count too large for a float
    (an int past about 1.8e308) raises ``OverflowError``, as ``float()`` does; a time past the float range
    is ``inf``.

    Raises:
        TypeError: when a value is not a number: a bool (not a count), a string, None, a tensor.
        ValueError: when ``flops`` or ``hbm_bytes`` is negative, or ``peak_flops`` or ``bandwidth`` not
            positive, or a value is not finite.
        OverflowError: when a count is an int too large for a float.
    """
    values = {"flops": flops, "hbm_bytes": hbm_bytes, "peak_flops": peak_flops, "bandwidth": bandwidth}
    as_float = {}
    for name, value in values.items():
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a number (an int or a float, not a bool), got {value!r}")
        as_float[name] = float(value)  # float64; OverflowError for an int past the float range
        if not math.isfinite(as_float[name]):
            raise ValueError(f"{name} must be finite, got {value!r}")
    for name in ("flops", "hbm_bytes"):
        if as_float[name] < 0:
            raise ValueError(f"{name} must be >= 0, got {values[name]!r}")
    for name in ("peak_flops", "bandwidth"):
        if as_float[name] <= 0:
            raise ValueError(f"{name} must be > 0, got {values[name]!r}")
    return max(as_float["flops"] / as_float["peak_flops"], as_float["hbm_bytes"] / as_float["bandwidth"])


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
        chunk_size: number of query rows per chunk, an integer >= 1 (numpy integers too).
        mask: optional bool tensor broadcastable to the scores ``(..., T_q, T_k)``; True means the query
            may attend to the key. A query row whose keys are all masked gets an output of **zeros**
            (there is no distribution to average with; zeros, like chapter 4's ``masked_softmax``,
            rather than NaN).

    Returns:
        Only the output ``(..., T_q, d_v)`` -- returning the weights would bring back the
        ``(T_q, T_k)`` matrix this function exists to avoid.

    Raises:
        TypeError: when ``chunk_size`` is not an integer (a float or a bool; numpy integers are), or ``mask``
            is not a bool tensor.
        ValueError: when ``chunk_size`` < 1, q and k differ in ``d_k``, k and v differ in ``T_k``, or
            the mask does not broadcast to the scores.
    """
    chunk_size = _check_size("chunk_size", chunk_size, 1)  # TypeError for a non-integer, as attention_cost
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
