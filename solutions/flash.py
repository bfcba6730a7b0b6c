"""Chapter 9, FlashAttention: the reference implementations.

Read top to bottom, in the chapter's order: plain attention that builds the whole score matrix (the
baseline and the oracle); the online softmax, which normalises a row it sees one block at a time; the
FlashAttention forward pass, which tiles queries and keys and never holds more than one
``(block_q, block_k)`` tile of scores; its backward pass, which recomputes the tiles from the saved
log-sum-exp instead of storing the attention matrix; an autograd ``Function`` tying the two together;
and a helper that measures the peak memory of each approach in a fresh process.

Conventions: ``q`` is ``(..., T_q, d)``, ``k`` is ``(..., T_k, d)``, ``v`` is ``(..., T_k, d_v)`` with
the same leading batch dims (typically ``(B, h)``), and scores are scaled by ``1/sqrt(d)``.
``causal=True`` lets query ``i`` attend to keys ``j <= i``, counting both from the start of their
sequences ("top-left aligned"): the convention of ``torch.nn.functional.scaled_dot_product_attention``
with ``is_causal=True``, also when ``T_q != T_k``. With that alignment every query sees key 0, so no row
is ever fully masked. ``lse`` is the natural-log log-sum-exp of the scaled (and masked) scores of each
query row, shape ``(..., T_q)``. Every function returns new tensors and leaves its arguments unchanged.

Low-precision inputs (float16, bfloat16) are computed in float32 tile by tile; ``out`` comes back in the
input's dtype and ``lse`` in float32, as FlashAttention kernels do.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import torch

NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------------------
# shared helpers


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype tiles are computed in: float32 for half types, the input's dtype otherwise."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() < 2:
            raise ValueError(f"{name} must be a floating tensor of shape (..., T, d), got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"q and k must share d, got q (..., {q.shape[-2]}, {q.shape[-1]}) "
                         f"and k (..., {k.shape[-2]}, {k.shape[-1]})")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have one row per key, got T_k={k.shape[-2]} and {v.shape[-2]}")
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise ValueError(f"q, k and v must have the same leading dims, got {tuple(q.shape[:-2])}, "
                         f"{tuple(k.shape[:-2])} and {tuple(v.shape[:-2])}")
    if k.shape[-2] == 0:
        raise ValueError("attention needs at least one key (T_k >= 1)")


def _check_block(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _causal_tile_mask(i0: int, i1: int, j0: int, j1: int, device: torch.device) -> torch.Tensor:
    """``(i1 - i0, j1 - j0)`` bool, True where key ``j`` comes *after* query ``i`` (to be masked)."""
    rows = torch.arange(i0, i1, device=device)[:, None]
    cols = torch.arange(j0, j1, device=device)[None, :]
    return cols > rows


# ---------------------------------------------------------------------------------------------------
# the baseline: the whole (T_q, T_k) matrix at once


def naive_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Standard attention, materialising the ``(..., T_q, T_k)`` scores: the oracle of this chapter.

    Args:
        q: ``(..., T_q, d)``; k: ``(..., T_k, d)``; v: ``(..., T_k, d_v)``, same leading dims.
        causal: mask keys ``j > i`` (top-left aligned, like SDPA's ``is_causal=True``).

    Returns:
        ``(out, lse)``: ``out`` ``(..., T_q, d_v)`` in ``q``'s dtype; ``lse`` ``(..., T_q)``, the natural
        log of ``sum_j exp(s_ij)`` for the scaled scores ``s = q k^T / sqrt(d)``.
    """
    _check_qkv(q, k, v)
    cd = _compute_dtype(q.dtype)
    T_q, T_k = q.shape[-2], k.shape[-2]
    s = (q.to(cd) @ k.to(cd).transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    if causal:
        s = s.masked_fill(_causal_tile_mask(0, T_q, 0, T_k, q.device), NEG_INF)
    lse = torch.logsumexp(s, dim=-1)  # (..., T_q)
    p = torch.exp(s - lse[..., None])  # (..., T_q, T_k), rows sum to 1
    out = (p @ v.to(cd)).to(q.dtype)  # (..., T_q, d_v)
    return out, lse


# ---------------------------------------------------------------------------------------------------
# online softmax (Milakov & Gimelshein, 2018)


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last dim, reading each row in blocks of ``block_size`` entries.

    One pass over the blocks keeps, per row, the running maximum ``m`` and the running sum
    ``l = sum exp(x_j - m)`` of the entries seen so far; when a block raises the maximum, the old sum is
    rescaled by ``exp(m_old - m_new)``. A second sweep writes ``exp(x_j - m) / l``. No temporary is
    larger than ``(rows, block_size)``; only the output has the size of ``x``.

    Entries equal to ``-inf`` (masked logits) get weight exactly 0, even when a whole block of a row is
    ``-inf``; a row made only of ``-inf`` gives NaN, like ``torch.softmax``.

    Args:
        x: floating tensor ``(..., n)``, any leading dims.
        block_size: positive int; the last block may be shorter.

    Returns:
        A new tensor of ``x``'s shape and dtype, summing to 1 along the last dim.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError("x must be a floating tensor")
    _check_block("block_size", block_size)
    n = x.shape[-1]
    m = x.new_full(x.shape[:-1], NEG_INF)  # (...,) running max
    l = x.new_zeros(x.shape[:-1])  # (...,) running sum of exp(x - m)
    for j0 in range(0, n, block_size):
        xb = x[..., j0:j0 + block_size]  # (..., b)
        m_new = torch.maximum(m, xb.amax(dim=-1))  # (...,)
        # a row with only -inf so far keeps m = -inf; shift by 0 there so exp(-inf - -inf) never makes NaN
        shift = m_new.masked_fill(m_new == NEG_INF, 0.0)
        l = l * torch.exp(m - shift) + torch.exp(xb - shift[..., None]).sum(dim=-1)
        m = m_new
    shift = m.masked_fill(m == NEG_INF, 0.0)
    out = torch.empty_like(x)
    for j0 in range(0, n, block_size):
        out[..., j0:j0 + block_size] = torch.exp(x[..., j0:j0 + block_size] - shift[..., None]) / l[..., None]
    return out


# ---------------------------------------------------------------------------------------------------
# FlashAttention forward (Dao et al., 2022; loop order of FlashAttention-2, Dao 2024)


def flash_attention_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    block_q: int = 64, block_k: int = 64, causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact attention computed tile by tile, never building a ``(T_q, T_k)`` tensor.

    For each block of ``block_q`` queries, walk over the keys in blocks of ``block_k``, keeping per query
    the running max ``m``, the running sum ``l`` and an unnormalised output accumulator ``acc``
    ``(block_q, d_v)``; rescale ``l`` and ``acc`` by ``exp(m_old - m_new)`` when the max grows, and divide
    by ``l`` once at the end. With ``causal=True``, key blocks that lie entirely after the query block
    are skipped and only tiles that cross the diagonal are masked.

    Args:
        q: ``(..., T_q, d)``; k: ``(..., T_k, d)``; v: ``(..., T_k, d_v)``, same leading dims.
        block_q, block_k: tile sizes (positive ints; ``T`` need not be a multiple).
        causal: query ``i`` sees keys ``j <= i`` (top-left aligned, as SDPA's ``is_causal=True``).

    Returns:
        ``(out, lse)``: ``out`` ``(..., T_q, d_v)`` equal to ``softmax(q k^T / sqrt(d)) v``; ``lse``
        ``(..., T_q)``, the natural-log log-sum-exp of each query's scaled scores (what the backward pass
        needs to rebuild the probabilities).
    """
    _check_qkv(q, k, v)
    _check_block("block_q", block_q)
    _check_block("block_k", block_k)
    cd = _compute_dtype(q.dtype)
    T_q, T_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    batch = q.shape[:-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    out = q.new_empty(*batch, T_q, d_v)
    lse = q.new_empty(*batch, T_q, dtype=cd)
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        q_i = q[..., i0:i1, :].to(cd) * scale  # (..., bq, d), the scale folded into the queries once
        m = q_i.new_full((*batch, i1 - i0), NEG_INF)  # (..., bq) running max
        l = q_i.new_zeros((*batch, i1 - i0))  # (..., bq) running sum of exp(s - m)
        acc = q_i.new_zeros((*batch, i1 - i0, d_v))  # (..., bq, d_v) running sum of exp(s - m) v
        # causal: keys at or after i1 are masked for every query of this block, so stop there
        stop = min(T_k, i1) if causal else T_k
        for j0 in range(0, stop, block_k):
            j1 = min(j0 + block_k, stop)
            s = q_i @ k[..., j0:j1, :].to(cd).transpose(-2, -1)  # (..., bq, bk)
            if causal and j1 - 1 > i0:  # the tile crosses the diagonal
                s = s.masked_fill(_causal_tile_mask(i0, i1, j0, j1, q.device), NEG_INF)
            # key 0 is in the first tile and visible to every query, so m_new is finite from then on
            m_new = torch.maximum(m, s.amax(dim=-1))  # (..., bq)
            alpha = torch.exp(m - m_new)  # (..., bq), 0 on the first tile (m = -inf)
            p = torch.exp(s - m_new[..., None])  # (..., bq, bk), unnormalised probabilities
            l = alpha * l + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v[..., j0:j1, :].to(cd)  # (..., bq, d_v)
            m = m_new
        out[..., i0:i1, :] = acc / l[..., None]
        lse[..., i0:i1] = m + torch.log(l)
    return out, lse


# ---------------------------------------------------------------------------------------------------
# FlashAttention backward with recomputation (FlashAttention-2)


def flash_attention_backward(
    grad_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    out: torch.Tensor, lse: torch.Tensor,
    block_q: int = 64, block_k: int = 64, causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of attention from the forward's ``out`` and ``lse``, recomputing each tile of ``P``.

    With ``s = q k^T / sqrt(d)``, ``P = exp(s - lse)`` (exactly the forward's probabilities) and
    ``D_i = sum_c dO_ic O_ic`` (which equals ``sum_j P_ij dP_ij``):
    ``dV = P^T dO``, ``dP = dO V^T``, ``dS = P * (dP - D)``, ``dQ = dS K / sqrt(d)``,
    ``dK = dS^T Q / sqrt(d)``. The outer loop runs over key blocks (their ``dK``, ``dV`` accumulate in
    registers on a GPU), the inner loop over query blocks; no ``(T_q, T_k)`` tensor is ever built.

    Args:
        grad_out: ``dO``, ``(..., T_q, d_v)``; q, k, v as for :func:`flash_attention_forward`;
        out: the forward's output ``(..., T_q, d_v)``; lse: the forward's ``(..., T_q)``.
        block_q, block_k, causal: as for the forward.

    Returns:
        ``(dq, dk, dv)`` of the shapes and dtypes of ``q``, ``k``, ``v``.
    """
    _check_qkv(q, k, v)
    _check_block("block_q", block_q)
    _check_block("block_k", block_k)
    T_q, T_k, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    batch = q.shape[:-2]
    if tuple(grad_out.shape) != (*batch, T_q, d_v) or tuple(out.shape) != (*batch, T_q, d_v):
        raise ValueError(f"grad_out and out must have shape (..., T_q, d_v) = {(*batch, T_q, d_v)}, "
                         f"got {tuple(grad_out.shape)} and {tuple(out.shape)}")
    if tuple(lse.shape) != (*batch, T_q):
        raise ValueError(f"lse must have shape (..., T_q) = {(*batch, T_q)}, got {tuple(lse.shape)}")
    cd = _compute_dtype(q.dtype)
    scale = 1.0 / math.sqrt(q.shape[-1])
    D = (grad_out.to(cd) * out.to(cd)).sum(dim=-1)  # (..., T_q)
    dq = q.new_zeros(q.shape, dtype=cd)
    dk = k.new_empty(k.shape, dtype=cd)
    dv = v.new_empty(v.shape, dtype=cd)
    for j0 in range(0, T_k, block_k):
        j1 = min(j0 + block_k, T_k)
        k_j, v_j = k[..., j0:j1, :].to(cd), v[..., j0:j1, :].to(cd)  # (..., bk, d), (..., bk, d_v)
        dk_j = k_j.new_zeros(k_j.shape)  # (..., bk, d)
        dv_j = v_j.new_zeros(v_j.shape)  # (..., bk, d_v)
        # causal: queries before j0 see none of these keys; start at the query block holding j0
        start = (j0 // block_q) * block_q if causal else 0
        for i0 in range(start, T_q, block_q):
            i1 = min(i0 + block_q, T_q)
            q_i = q[..., i0:i1, :].to(cd)  # (..., bq, d)
            do_i = grad_out[..., i0:i1, :].to(cd)  # (..., bq, d_v)
            s = (q_i @ k_j.transpose(-2, -1)) * scale  # (..., bq, bk), recomputed
            if causal and j1 - 1 > i0:
                s = s.masked_fill(_causal_tile_mask(i0, i1, j0, j1, q.device), NEG_INF)
            p = torch.exp(s - lse[..., i0:i1, None].to(cd))  # (..., bq, bk), the forward's P tile
            dv_j += p.transpose(-2, -1) @ do_i  # (..., bk, d_v)
            dp = do_i @ v_j.transpose(-2, -1)  # (..., bq, bk)
            ds = p * (dp - D[..., i0:i1, None])  # (..., bq, bk), softmax backward, row by row
            dq[..., i0:i1, :] += (ds @ k_j) * scale  # (..., bq, d)
            dk_j += ds.transpose(-2, -1) @ q_i  # (..., bk, d), dS^T Q (not Q^T dS)
        dk[..., j0:j1, :] = dk_j * scale
        dv[..., j0:j1, :] = dv_j
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class FlashAttention(torch.autograd.Function):
    """``FlashAttention.apply(q, k, v, causal=False, block_q=64, block_k=64) -> out``.

    Saves only ``q, k, v, out, lse`` (``O(T)`` per head) for the backward pass, which recomputes the
    probabilities tile by tile.
    """

    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=64, block_k=64):
        out, lse = flash_attention_forward(q, k, v, block_q, block_k, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.blocks, ctx.causal = (block_q, block_k), causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(grad_out, q, k, v, out, lse, *ctx.blocks, ctx.causal)
        return dq, dk, dv, None, None, None


# ---------------------------------------------------------------------------------------------------
# the Triton exercise (the kernel and its launcher live in solutions.flash_triton)


def triton_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The Triton exercise's function, answered: the launcher with the answer-key kernel.

    ``q`` ``(B, h, T_q, d)``, ``k``, ``v`` ``(B, h, T_k, d)`` (float32 or float16; bfloat16 on a GPU),
    ``d`` in (16, 32, 64, 128). Returns ``(out, lse)``: ``out`` in ``q``'s dtype, ``lse`` float32. On a CPU
    the kernel runs in Triton's interpreter; needs ``triton``.
    """
    from solutions.flash_triton import triton_attention_forward as launch

    return launch(q, k, v, causal)


def attention_forward_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """What :func:`triton_attention_forward` must return, from float64 standard attention: ``out`` in
    ``q``'s dtype, ``lse`` in float32 (the hidden checks' reference; no triton needed)."""
    out, lse = naive_attention(q.double(), k.double(), v.double(), causal)
    return out.to(q.dtype), lse.float()


# ---------------------------------------------------------------------------------------------------
# measured memory: peak resident set size of a fresh process per call

#: Run by a fresh interpreter: import torch once, then fork one child per measurement, so every call is
#: measured in a process of its own that never ran anything else, without paying the import each time.
_RSS_HELPER = r"""
import json, os, sys
import torch
import torch.nn.functional as F
from solutions.flash import flash_attention_forward, naive_attention


def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def measure(kind, B, h, T, d, causal, block):
    torch.set_num_threads(1)
    fn = {"naive": lambda q, k, v: naive_attention(q, k, v, causal),
          "tiled": lambda q, k, v: flash_attention_forward(q, k, v, block, block, causal),
          "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)}[kind]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, h, T, d, generator=g) for _ in range(3))
    fn(q[..., :8, :], k[..., :8, :], v[..., :8, :])  # one-off allocations (thread pools, kernels) land here
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark VmHWM to the current RSS
    before = status("VmRSS")
    out = fn(q, k, v)
    return status("VmHWM") - before


for spec in json.loads(sys.argv[1]):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            result = {"bytes": measure(*spec)}
        except BaseException as exc:
            result = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(w, json.dumps(result).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        print(f.read(), flush=True)
    os.waitpid(pid, 0)
"""

KINDS = ("naive", "tiled", "sdpa")


def peak_rss_increases(specs: list[tuple], workers: int = 2) -> list[int]:
    """Peak resident memory (bytes) that each attention forward call adds, each in a fresh process.

    ``specs`` holds ``(kind, B, h, T, d, causal, block)`` tuples: ``kind`` is ``"naive"``
    (:func:`naive_attention`), ``"tiled"`` (:func:`flash_attention_forward` with ``block x block``
    tiles) or ``"sdpa"`` (``F.scaled_dot_product_attention``), on float32 inputs ``(B, h, T, d)`` on the
    CPU with one thread.

    The peak RSS of a process includes the interpreter, torch and the inputs; what a call costs is the
    increase over the RSS measured right before it. A process's high-water mark only ever grows and
    freed memory may stay cached by the allocator, so every measurement runs in a process of its own:
    ``workers`` fresh interpreters import torch once and fork one child per measurement; the child
    allocates the inputs, warms up on a tiny problem, resets the high-water mark
    (``/proc/self/clear_refs``) and reports ``VmHWM - VmRSS`` around the call. glibc's mmap threshold is
    fixed at 1 MiB, so that large blocks go back to the system as soon as they are freed. Linux only.
    """
    for spec in specs:
        if len(spec) != 7 or spec[0] not in KINDS:
            raise ValueError(f"a spec is (kind, B, h, T, d, causal, block) with kind in {KINDS}, got {spec!r}")
    root = str(Path(__file__).resolve().parents[1])
    # a fixed mmap threshold (glibc) returns every freed block of 1 MiB or more to the system at once
    # instead of adapting the threshold and caching it, which makes the peaks repeatable
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_=str(2**20))
    shares = [list(range(i, len(specs), workers)) for i in range(min(workers, len(specs)))]
    procs = [subprocess.Popen([sys.executable, "-c", _RSS_HELPER, json.dumps([specs[i] for i in share])],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=root)
             for share in shares]
    results: list[int] = [0] * len(specs)
    for share, proc in zip(shares, procs):
        stdout, stderr = proc.communicate()
        lines = stdout.strip().splitlines()
        if proc.returncode != 0 or len(lines) != len(share):
            raise RuntimeError(f"memory measurement failed:\n{stderr[-2000:]}")
        for i, line in zip(share, lines):
            record = json.loads(line)
            if "error" in record:
                raise RuntimeError(f"measuring {specs[i]} failed: {record['error']}")
            results[i] = max(0, int(record["bytes"]))
    return results


def peak_rss_increase(kind: str, B: int, h: int, T: int, d: int, causal: bool = False,
                      block: int = 128) -> int:
    """Peak resident memory (bytes) one forward call of ``kind`` adds; see :func:`peak_rss_increases`."""
    return peak_rss_increases([(kind, B, h, T, d, causal, block)], workers=1)[0]
