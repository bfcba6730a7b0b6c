"""Chapter 9, FlashAttention: a reference Triton kernel (not an exercise).

The chapter builds FlashAttention in PyTorch (``solutions.flash``): tiles of queries meet tiles of keys,
an online softmax keeps a running maximum ``m`` and a running denominator ``l`` per query row, and the
``(T_q, T_k)`` score matrix never exists. A PyTorch loop over tiles is correct but slow: every tile costs
several kernel launches and a round trip of the tile through GPU memory. This module writes the same
algorithm as one Triton kernel, so a tile of scores lives only in registers and on-chip memory:

* forward: one program per ``(query block, batch * head)``; it streams the key/value blocks, keeps
  ``acc`` (BLOCK_M, d), ``m`` and ``l`` in fp32, and writes ``out`` and the row log-sum-exp ``lse``;
* backward (FlashAttention-2 style recomputation): ``delta = rowsum(dO * O)``; one kernel owns a key block
  and streams the query blocks to accumulate ``dK`` and ``dV``; another owns a query block and streams
  the key blocks to accumulate ``dQ``. The probabilities are recomputed from ``q``, ``k`` and ``lse``.

Conventions, as in the rest of the course: ``q`` is ``(B, h, T_q, d)``, ``k`` and ``v`` are
``(B, h, T_k, d)``, the scale is ``1/sqrt(d)``, ``causal=True`` is top-left aligned like
``F.scaled_dot_product_attention(is_causal=True)`` (query ``i`` sees keys ``j <= i``; with ``T_q > T_k``
the last rows see every key, with ``T_q < T_k`` the last keys are seen by no one), and ``lse`` is the
natural log of the softmax denominator, ``lse_i = log sum_j exp(q_i . k_j / sqrt(d))``, in fp32.

Base 2 inside the kernel. GPUs evaluate ``exp2`` natively (``exp`` is ``exp2`` after a multiply), so the
kernel folds ``log2(e)`` into the score scale once: ``s2 = (q . k) * (log2(e) / sqrt(d))``, and then
``exp(s - m) = exp2(s2 - m2)`` with ``m2`` the running maximum of ``s2``. The softmax is unchanged; only
the stored ``lse`` is converted back: ``lse = ln(2) * (m2 + log2(l))``.

Partial blocks. ``T_q`` and ``T_k`` need not be multiples of the block sizes: loads past the end are
masked (read as 0), the scores of keys past ``T_k`` are set to ``-inf`` so they get weight 0, and rows
past ``T_q`` are never stored. When a length *is* a multiple of its block, the ``EVEN_*`` compile-time
flags drop that masking from the generated code. A causal query block splits its key loop in two: the
blocks strictly left of the diagonal need no mask, only the few blocks that cross it do.

Dtypes. fp32, fp16 and bf16 inputs; products are accumulated in fp32 and ``p`` is cast to the input dtype
before the ``p @ v`` product, as in FlashAttention. For fp32 inputs the dot products use full fp32
precision unless ``allow_tf32=True`` (TF32 keeps 10 mantissa bits: fast on tensor cores, ~1e-3 off).

Running it. On a CUDA GPU, ``triton_flash_attention(q, k, v)`` compiles on first use. On a CPU, Triton's
interpreter runs the same kernels with NumPy when the environment variable ``TRITON_INTERPRET=1`` is set
*before this module is imported* (Triton decides at decoration time whether ``@triton.jit`` builds a GPU
kernel or an interpreted one; :func:`interpreting` says which happened); it is slow and meant for tests
at small sizes, and it has no bf16. Without ``triton`` installed the module still imports
(``HAVE_TRITON`` is False) and the entry points raise a ``RuntimeError`` that says how to install it
(``pip install -e '.[triton]'``).
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from typing import NamedTuple

import torch

try:
    import triton
    import triton.language as tl
except ImportError as exc:  # the course runs without triton; only this module's kernels need it
    triton = None
    tl = None
    _IMPORT_ERROR: str | None = f"{type(exc).__name__}: {exc}"
else:
    _IMPORT_ERROR = None

HAVE_TRITON: bool = triton is not None
TRITON_VERSION: str | None = getattr(triton, "__version__", None)

SUPPORTED_HEAD_DIMS = (16, 32, 64, 128)
LOG2_E = math.log2(math.e)  # 1.4426950408889634

__all__ = [
    "HAVE_TRITON",
    "TRITON_VERSION",
    "SUPPORTED_HEAD_DIMS",
    "KernelConfig",
    "default_config",
    "interpreting",
    "triton_flash_attention",
    "triton_flash_attention_forward",
    "triton_flash_attention_backward",
]


def interpreting() -> bool:
    """True when this module's kernels run in Triton's CPU interpreter.

    Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a kernel, that is when this module is
    imported; setting the variable later changes nothing, so the answer comes from the kernel objects.
    """
    return HAVE_TRITON and type(_fwd_kernel).__name__ == "InterpretedFunction"


# ----------------------------------------------------------------------------------------------------
# Kernels (defined only when triton imports)
# ----------------------------------------------------------------------------------------------------

if HAVE_TRITON:

    @triton.jit
    def _fwd_key_loop(
        acc, l_i, m_i, q,  # running state: (BLOCK_M, D) fp32, (BLOCK_M,) fp32 x2; q tile (BLOCK_M, D)
        k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
        offs_m, offs_d, T_k, lo, hi, qk_scale,
        BLOCK_N: tl.constexpr, MASK_COLS: tl.constexpr, MASK_CAUSAL: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
    ):
        """Stream key/value blocks [lo, hi) through the online softmax of one query tile (base 2)."""
        for start_n in range(lo, hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            kt_ptrs = k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd  # (D, BLOCK_N)
            v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd  # (BLOCK_N, D)
            if MASK_COLS:
                kt = tl.load(kt_ptrs, mask=offs_n[None, :] < T_k, other=0.0)
                v = tl.load(v_ptrs, mask=offs_n[:, None] < T_k, other=0.0)
            else:
                kt = tl.load(kt_ptrs)
                v = tl.load(v_ptrs)
            qk = tl.dot(q, kt, input_precision=DOT_PRECISION)  # (BLOCK_M, BLOCK_N) raw dot products
            if MASK_COLS:
                qk = tl.where(offs_n[None, :] < T_k, qk, float("-inf"))
            if MASK_CAUSAL:
                qk = tl.where(offs_n[None, :] <= offs_m[:, None], qk, float("-inf"))
            # scores in log2 units are qk * qk_scale (qk_scale > 0, so the max commutes with the scaling,
            # and the scaling fuses with the subtraction below into one multiply-add). Every row has seen
            # a finite score by now (key 0 is in its first block), so m_new is finite and
            # exp2(-inf - m_new) = 0 gives masked keys weight exactly 0.
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            alpha = tl.math.exp2(m_i - m_new)  # rescales what was accumulated under the old maximum
            p = tl.math.exp2(qk * qk_scale - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
            m_i = m_new
        return acc, l_i, m_i

    @triton.jit
    def _fwd_kernel(
        Q, K, V, O, LSE,
        stride_qb, stride_qh, stride_qm, stride_qd,
        stride_kb, stride_kh, stride_kn, stride_kd,
        stride_vb, stride_vh, stride_vn, stride_vd,
        stride_ob, stride_oh, stride_om, stride_od,
        h, T_q, T_k, qk_scale,
        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        CAUSAL: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        if CAUSAL:  # the last query blocks have the most keys to see: start them first, shorten the tail
            pid_m = tl.num_programs(0) - 1 - pid_m
        pid_bh = tl.program_id(1)
        off_b = (pid_bh // h).to(tl.int64)
        off_h = (pid_bh % h).to(tl.int64)
        q_base = Q + off_b * stride_qb + off_h * stride_qh
        k_base = K + off_b * stride_kb + off_h * stride_kh
        v_base = V + off_b * stride_vb + off_h * stride_vh
        o_base = O + off_b * stride_ob + off_h * stride_oh

        start_m = pid_m * BLOCK_M
        offs_m = start_m + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_DIM)
        q_ptrs = q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
        if EVEN_M:
            q = tl.load(q_ptrs)
        else:
            q = tl.load(q_ptrs, mask=offs_m[:, None] < T_q, other=0.0)  # rows past T_q: zeros, never stored

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

        # Key blocks [0, full_end) are whole; the tail [full_end, T_k) needs the column mask.
        if EVEN_N:
            full_end = T_k
        else:
            full_end = (T_k // BLOCK_N) * BLOCK_N
        if CAUSAL:
            # Blocks that end at or before the tile's first row are fully visible; the ones from
            # diag_start up to the tile's last row (or T_k) cross the diagonal and are masked.
            diag_start = (start_m // BLOCK_N) * BLOCK_N
            mid = tl.minimum(diag_start, full_end)
            hi = tl.minimum(start_m + BLOCK_M, T_k)
            acc, l_i, m_i = _fwd_key_loop(
                acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                offs_m, offs_d, T_k, 0, mid, qk_scale,
                BLOCK_N, False, False, DOT_PRECISION)
            acc, l_i, m_i = _fwd_key_loop(
                acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                offs_m, offs_d, T_k, mid, hi, qk_scale,
                BLOCK_N, True, True, DOT_PRECISION)  # a few blocks: always mask the columns too
        else:
            acc, l_i, m_i = _fwd_key_loop(
                acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                offs_m, offs_d, T_k, 0, full_end, qk_scale,
                BLOCK_N, False, False, DOT_PRECISION)
            if not EVEN_N:
                acc, l_i, m_i = _fwd_key_loop(
                    acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                    offs_m, offs_d, T_k, full_end, T_k, qk_scale,
                    BLOCK_N, True, False, DOT_PRECISION)

        out = acc / l_i[:, None]
        lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # back to natural log: ln 2 * log2(sum)
        o_ptrs = o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od
        lse_ptrs = LSE + pid_bh.to(tl.int64) * T_q + offs_m
        if EVEN_M:
            tl.store(o_ptrs, out.to(O.dtype.element_ty))
            tl.store(lse_ptrs, lse)
        else:
            tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=offs_m[:, None] < T_q)
            tl.store(lse_ptrs, lse, mask=offs_m < T_q)

    @triton.jit
    def _bwd_delta_kernel(
        O, DO, DELTA,
        stride_ob, stride_oh, stride_om, stride_od,
        stride_db, stride_dh, stride_dm, stride_dd,
        h, T_q,
        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
    ):
        """delta_i = sum_d dO[i, d] * O[i, d] (fp32): the row term of softmax's backward."""
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
        off_b = (pid_bh // h).to(tl.int64)
        off_h = (pid_bh % h).to(tl.int64)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_DIM)
        row_ok = offs_m[:, None] < T_q
        o = tl.load(O + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_om
                    + offs_d[None, :] * stride_od, mask=row_ok, other=0.0)
        do = tl.load(DO + off_b * stride_db + off_h * stride_dh + offs_m[:, None] * stride_dm
                     + offs_d[None, :] * stride_dd, mask=row_ok, other=0.0)
        delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
        tl.store(DELTA + pid_bh.to(tl.int64) * T_q + offs_m, delta, mask=offs_m < T_q)

    @triton.jit
    def _bwd_dkdv_kernel(
        Q, K, V, DO, LSE, DELTA, DK, DV,
        stride_qb, stride_qh, stride_qm, stride_qd,
        stride_kb, stride_kh, stride_kn, stride_kd,
        stride_vb, stride_vh, stride_vn, stride_vd,
        stride_db, stride_dh, stride_dm, stride_dd,
        h, T_q, T_k, sm_scale, qk_scale,
        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr,
    ):
        """One key block: dV = sum_i P^T dO, dK = scale * sum_i dS^T Q, streaming the query blocks.

        dK and dV are written with the strides of k and v (the wrapper allocates them like k and v).
        """
        pid_n = tl.program_id(0)
        pid_bh = tl.program_id(1)
        off_b = (pid_bh // h).to(tl.int64)
        off_h = (pid_bh % h).to(tl.int64)
        q_base = Q + off_b * stride_qb + off_h * stride_qh
        do_base = DO + off_b * stride_db + off_h * stride_dh
        row_base = pid_bh.to(tl.int64) * T_q  # LSE and DELTA are (B*h, T_q), contiguous

        start_n = pid_n * BLOCK_N
        offs_n = start_n + tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        col_ok = offs_n[:, None] < T_k
        k_ptrs = K + off_b * stride_kb + off_h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd
        v_ptrs = V + off_b * stride_vb + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
        k = tl.load(k_ptrs, mask=col_ok, other=0.0)  # (BLOCK_N, D)
        v = tl.load(v_ptrs, mask=col_ok, other=0.0)
        dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)

        lo = 0
        if CAUSAL:
            lo = (start_n // BLOCK_M) * BLOCK_M  # queries before this key block never see it
        for start_m in range(lo, T_q, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            row_ok = offs_m < T_q
            qt = tl.load(q_base + offs_m[None, :] * stride_qm + offs_d[:, None] * stride_qd,
                         mask=row_ok[None, :], other=0.0)  # (D, BLOCK_M)
            do = tl.load(do_base + offs_m[:, None] * stride_dm + offs_d[None, :] * stride_dd,
                         mask=row_ok[:, None], other=0.0)  # (BLOCK_M, D)
            # lse of padded rows = +inf makes their probabilities exactly 0
            lse2 = tl.load(LSE + row_base + offs_m, mask=row_ok, other=float("inf")) * 1.4426950408889634
            delta = tl.load(DELTA + row_base + offs_m, mask=row_ok, other=0.0)
            st = tl.dot(k, qt, input_precision=DOT_PRECISION) * qk_scale  # S^T in log2 units (BLOCK_N, BLOCK_M)
            pt = tl.math.exp2(st - lse2[None, :])  # P^T, recomputed from the saved log-sum-exp
            if CAUSAL:
                pt = tl.where(offs_n[:, None] <= offs_m[None, :], pt, 0.0)
            dv += tl.dot(pt.to(do.dtype), do, input_precision=DOT_PRECISION)
            dpt = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)  # (dO V^T)^T  (BLOCK_N, BLOCK_M)
            dst = pt * (dpt - delta[None, :])  # dS^T = P^T * (dP^T - delta)
            dk += tl.dot(dst.to(qt.dtype), tl.trans(qt), input_precision=DOT_PRECISION)
        dk = dk * sm_scale  # dK = dS^T Q / sqrt(d)

        dk_ptrs = DK + off_b * stride_kb + off_h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd
        dv_ptrs = DV + off_b * stride_vb + off_h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
        tl.store(dk_ptrs, dk.to(DK.dtype.element_ty), mask=col_ok)
        tl.store(dv_ptrs, dv.to(DV.dtype.element_ty), mask=col_ok)

    @triton.jit
    def _bwd_dq_kernel(
        Q, K, V, DO, LSE, DELTA, DQ,
        stride_qb, stride_qh, stride_qm, stride_qd,
        stride_kb, stride_kh, stride_kn, stride_kd,
        stride_vb, stride_vh, stride_vn, stride_vd,
        stride_db, stride_dh, stride_dm, stride_dd,
        h, T_q, T_k, sm_scale, qk_scale,
        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr,
    ):
        """One query block: dQ = scale * sum_j dS K, streaming the key blocks. dQ has q's strides."""
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
        off_b = (pid_bh // h).to(tl.int64)
        off_h = (pid_bh % h).to(tl.int64)
        k_base = K + off_b * stride_kb + off_h * stride_kh
        v_base = V + off_b * stride_vb + off_h * stride_vh
        row_base = pid_bh.to(tl.int64) * T_q

        start_m = pid_m * BLOCK_M
        offs_m = start_m + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_DIM)
        row_ok = offs_m < T_q
        q_ptrs = Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
        q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
        do = tl.load(DO + off_b * stride_db + off_h * stride_dh + offs_m[:, None] * stride_dm
                     + offs_d[None, :] * stride_dd, mask=row_ok[:, None], other=0.0)
        lse2 = tl.load(LSE + row_base + offs_m, mask=row_ok, other=float("inf")) * 1.4426950408889634
        delta = tl.load(DELTA + row_base + offs_m, mask=row_ok, other=0.0)
        dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

        hi = T_k
        if CAUSAL:
            hi = tl.minimum(start_m + BLOCK_M, T_k)
        for start_n in range(0, hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            col_ok = offs_n < T_k
            kt = tl.load(k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd,
                         mask=col_ok[None, :], other=0.0)  # (D, BLOCK_N)
            vt = tl.load(v_base + offs_n[None, :] * stride_vn + offs_d[:, None] * stride_vd,
                         mask=col_ok[None, :], other=0.0)  # (D, BLOCK_N)
            s = tl.dot(q, kt, input_precision=DOT_PRECISION) * qk_scale
            p = tl.math.exp2(s - lse2[:, None])
            keep = col_ok[None, :]
            if CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None])
            p = tl.where(keep, p, 0.0)
            dp = tl.dot(do, vt, input_precision=DOT_PRECISION)  # dO V^T  (BLOCK_M, BLOCK_N)
            ds = p * (dp - delta[:, None])
            dq += tl.dot(ds.to(kt.dtype), tl.trans(kt), input_precision=DOT_PRECISION)
        dq = dq * sm_scale
        dq_ptrs = DQ + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
        tl.store(dq_ptrs, dq.to(DQ.dtype.element_ty), mask=row_ok[:, None])


# ----------------------------------------------------------------------------------------------------
# Python side: checks, configuration, launches
# ----------------------------------------------------------------------------------------------------


class KernelConfig(NamedTuple):
    """Tile sizes and launch parameters of one forward launch."""

    block_m: int  # query rows per program
    block_n: int  # keys per step of the inner loop
    num_warps: int = 4
    num_stages: int = 2  # software-pipeline depth of the key/value loads (GPU only)


def default_config(d: int, device: torch.device | str | None = None) -> KernelConfig:
    """Block sizes and launch parameters used when the caller gives none.

    On a GPU: 128 query rows per program and 64 keys per step, 4 warps (8 for d = 128, whose tiles are
    twice as wide) and a 3-stage software pipeline for the key/value loads, a good starting point on
    Ampere and Hopper. Under the CPU interpreter every program instance is simulated with NumPy, so
    smaller tiles (32 x 32) keep the arrays small and the Python loop short.
    """
    dev = torch.device(device) if device is not None else None
    if interpreting() or (dev is not None and dev.type != "cuda"):
        return KernelConfig(32, 32, 4, 1)
    return KernelConfig(128, 64, 8 if d > 64 else 4, 3)


def _require_triton() -> None:
    if not HAVE_TRITON:
        raise RuntimeError(
            "solutions.flash_triton needs the `triton` package, which is not installed "
            f"({_IMPORT_ERROR}). Install it with `pip install -e '.[triton]'` (a CUDA GPU runs the kernels; "
            "on a CPU set TRITON_INTERPRET=1 before importing this module to use Triton's interpreter)."
        )


def _check_device(*tensors: torch.Tensor) -> None:
    dev = tensors[0].device
    if any(t.device != dev for t in tensors):
        raise ValueError(f"all tensors must be on one device, got {[str(t.device) for t in tensors]}")
    if dev.type == "cuda":
        if interpreting():
            raise RuntimeError("TRITON_INTERPRET=1 runs kernels on CPU tensors; move the inputs to the CPU")
    elif not interpreting():
        raise RuntimeError(
            f"Triton kernels run on CUDA tensors, got a {dev.type} tensor. For a CPU run set TRITON_INTERPRET=1 "
            "before importing solutions.flash_triton (Triton's interpreter; slow, for small tests)."
        )


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (B, h, T, d); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, h, _, d = q.shape
    if k.shape[:2] != (B, h) or v.shape[:2] != (B, h):
        raise ValueError(f"q, k, v must share (B, h) = {(B, h)}; got {tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[2] != v.shape[2]:
        raise ValueError(f"k and v must have the same length T_k; got {k.shape[2]} and {v.shape[2]}")
    if k.shape[3] != d or v.shape[3] != d:
        raise ValueError(f"this kernel needs d_k = d_v = d; got q {d}, k {k.shape[3]}, v {v.shape[3]}")
    if d not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head dim d must be one of {SUPPORTED_HEAD_DIMS}, got {d}")
    if q.shape[2] == 0 or k.shape[2] == 0:
        raise ValueError("T_q and T_k must be at least 1 (a query with no key has no softmax)")
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"dtype must be float32, float16 or bfloat16, got {q.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")


def _blocks(d: int, device: torch.device, block_m: int | None, block_n: int | None,
            num_warps: int | None, num_stages: int | None) -> KernelConfig:
    base = default_config(d, device)
    cfg = KernelConfig(block_m or base.block_m, block_n or base.block_n,
                       num_warps or base.num_warps, num_stages or base.num_stages)
    for name, b in (("block_m", cfg.block_m), ("block_n", cfg.block_n)):
        if b < 16 or b & (b - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot's smallest tile), got {b}")
    return cfg


def _dot_precision(dtype: torch.dtype, allow_tf32: bool) -> str:
    """``tl.dot``'s input precision: only fp32 operands are affected (fp16/bf16 always use tensor cores)."""
    return "ieee" if dtype == torch.float32 and not allow_tf32 else "tf32"


def triton_flash_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    allow_tf32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the forward kernel (no autograd): ``(out, lse)``.

    Args:
        q: ``(B, h, T_q, d)``; k, v: ``(B, h, T_k, d)``; d in ``SUPPORTED_HEAD_DIMS``; one dtype among
            fp32, fp16, bf16; any strides (the kernel takes them as arguments).
        causal: top-left aligned causal mask (query ``i`` sees keys ``j <= i``).
        block_m, block_n: query rows per program and keys per loop step (powers of two >= 16);
            ``None`` takes :func:`default_config`.
        num_warps, num_stages: Triton launch parameters (ignored by the interpreter).
        allow_tf32: fp32 inputs only: let ``tl.dot`` use TF32 tensor cores.

    Returns:
        ``out`` ``(B, h, T_q, d)`` in the input dtype and ``lse`` ``(B, h, T_q)`` in fp32 (natural log).
    """
    _require_triton()
    _check_qkv(q, k, v)
    cfg = _blocks(q.shape[-1], q.device, block_m, block_n, num_warps, num_stages)
    _check_device(q, k, v)
    B, h, T_q, d = q.shape
    T_k = k.shape[2]
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((B, h, T_q), device=q.device, dtype=torch.float32)
    qk_scale = LOG2_E / math.sqrt(d)  # 1/sqrt(d) and the change of base folded into one multiply
    grid = (triton.cdiv(T_q, cfg.block_m), B * h)
    _fwd_kernel[grid](
        q, k, v, out, lse,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        h, T_q, T_k, qk_scale,
        HEAD_DIM=d, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, CAUSAL=bool(causal),
        EVEN_M=T_q % cfg.block_m == 0, EVEN_N=T_k % cfg.block_n == 0,
        DOT_PRECISION=_dot_precision(q.dtype, allow_tf32),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out, lse


def triton_flash_attention_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    causal: bool = False,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    allow_tf32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention-2 backward from the saved ``out`` and ``lse``: ``(dq, dk, dv)``.

    ``delta = rowsum(dO * O)``, then ``dK, dV`` per key block and ``dQ`` per query block, each
    recomputing ``P = exp(S - lse)`` tile by tile (no ``(T_q, T_k)`` tensor, no atomics). Shapes as in
    :func:`triton_flash_attention_forward`; ``lse`` is ``(B, h, T_q)`` fp32. Gradients come back in the
    input dtype, with the shapes of ``q``, ``k``, ``v``.
    """
    _require_triton()
    _check_qkv(q, k, v)
    _blocks(q.shape[-1], q.device, block_m, block_n, num_warps, 1)
    _check_device(q, k, v, grad_out, out, lse)
    if grad_out.shape != q.shape or out.shape != q.shape:
        raise ValueError(f"grad_out and out must have q's shape {tuple(q.shape)}")
    B, h, T_q, d = q.shape
    T_k = k.shape[2]
    if lse.shape != (B, h, T_q):
        raise ValueError(f"lse must be (B, h, T_q) = {(B, h, T_q)}, got {tuple(lse.shape)}")
    cfg = _blocks(d, q.device, block_m, block_n, num_warps, 1)
    # backward tiles hold more live arrays than the forward ones; cap them at 64 on a GPU
    bm = cfg.block_m if interpreting() or block_m else min(cfg.block_m, 64)
    bn = cfg.block_n if interpreting() or block_n else min(cfg.block_n, 64)
    grad_out = grad_out.to(q.dtype)
    lse = lse.to(torch.float32).contiguous()
    delta = torch.empty_like(lse)
    _bwd_delta_kernel[(triton.cdiv(T_q, bm), B * h)](
        out, grad_out, delta, *out.stride(), *grad_out.stride(), h, T_q,
        HEAD_DIM=d, BLOCK_M=bm, num_warps=cfg.num_warps,
    )
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    dk = torch.empty_like(k, memory_format=torch.contiguous_format)
    dv = torch.empty_like(v, memory_format=torch.contiguous_format)
    # the kernels write dq with q's strides and dk, dv with k's and v's: use contiguous inputs for that
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    sm_scale = 1.0 / math.sqrt(d)
    common = dict(HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=bool(causal),
                  DOT_PRECISION=_dot_precision(q.dtype, allow_tf32), num_warps=cfg.num_warps)
    _bwd_dkdv_kernel[(triton.cdiv(T_k, bn), B * h)](
        q, k, v, grad_out, lse, delta, dk, dv,
        *q.stride(), *k.stride(), *v.stride(), *grad_out.stride(),
        h, T_q, T_k, sm_scale, sm_scale * LOG2_E, **common,
    )
    _bwd_dq_kernel[(triton.cdiv(T_q, bm), B * h)](
        q, k, v, grad_out, lse, delta, dq,
        *q.stride(), *k.stride(), *v.stride(), *grad_out.stride(),
        h, T_q, T_k, sm_scale, sm_scale * LOG2_E, **common,
    )
    return dq, dk, dv


class _TritonFlashAttention(torch.autograd.Function):
    """Autograd glue: forward kernel, then the FlashAttention-2 backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, causal, block_m, block_n, num_warps, num_stages, allow_tf32):
        out, lse = triton_flash_attention_forward(q, k, v, causal, block_m, block_n, num_warps, num_stages,
                                                  allow_tf32)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.opts = (causal, block_m, block_n, allow_tf32)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        causal, block_m, block_n, allow_tf32 = ctx.opts
        dq, dk, dv = triton_flash_attention_backward(grad_out.contiguous(), q, k, v, out, lse, causal,
                                                     block_m, block_n, allow_tf32=allow_tf32)
        return dq, dk, dv, None, None, None, None, None, None


def triton_flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    allow_tf32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention in Triton: ``softmax(q k^T / sqrt(d)) v`` and the row log-sum-exp.

    Args:
        q: queries ``(B, h, T_q, d)``; k, v: keys and values ``(B, h, T_k, d)``; ``T_q`` may differ from
            ``T_k``; d in {16, 32, 64, 128}; fp32, fp16 or bf16 (accumulation is fp32 throughout).
        causal: top-left aligned causal mask, as ``F.scaled_dot_product_attention(is_causal=True)``.
        block_m, block_n: tile sizes (powers of two >= 16); ``None``: :func:`default_config`.
        num_warps, num_stages: Triton launch parameters of the forward kernel.
        allow_tf32: fp32 inputs only: TF32 tensor-core dot products (faster, ~1e-3 relative error).

    Returns:
        ``(out, lse)``: ``out`` ``(B, h, T_q, d)`` in the input dtype, differentiable (the backward runs
        the FlashAttention-2 kernels of this module); ``lse`` ``(B, h, T_q)`` fp32, natural log,
        not differentiable.

    Raises:
        RuntimeError: triton is not installed, or the tensors are not on a device Triton can run on
            (CUDA, or CPU under ``TRITON_INTERPRET=1``).
        ValueError: bad shapes, head dim, dtype or block sizes.
    """
    _require_triton()
    return _TritonFlashAttention.apply(q, k, v, bool(causal), block_m, block_n, num_warps, num_stages, allow_tf32)


# ----------------------------------------------------------------------------------------------------
# The chapter's Triton exercise: the answer key
# ----------------------------------------------------------------------------------------------------
#
# The notebook gives students the launcher below (:func:`triton_attention_forward`) and the first lines of
# the kernel (program ids, offsets, the query tile, the empty running state); they write the rest: the loop
# over key blocks with the online-softmax update, the masking of a partial last block, the causal split and
# the final stores. The notebook's solution region holds the lines of :func:`attention_forward_kernel` that
# follow the ``# --- the student's part ---`` marker, verbatim (tests/test_flash_reference.py pins that).
# The kernel is a plain function here and is handed to ``triton.jit`` on first use, so that the
# interpreter-or-GPU decision is taken when the launcher runs, not when this module is imported.

#: (BLOCK_M, BLOCK_N) the launcher fixes: small tiles in the interpreter (16 is ``tl.dot``'s smallest), 64 on a GPU.
EXERCISE_BLOCKS = {"interpreter": (16, 32), "cuda": (64, 64)}
EXERCISE_HEAD_DIMS = (16, 32, 64, 128)


def attention_forward_kernel(
    Q, K, V, O, LSE,  # pointers: q, o (B*h, T_q, D); k, v (B*h, T_k, D), contiguous; lse (B*h, T_q) fp32
    T_q, T_k, sm_scale,  # lengths, and the score scale 1/sqrt(D)
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    """One program: BLOCK_M queries of one (batch, head) against all its keys, BLOCK_N keys at a time."""
    pid_m = tl.program_id(0)  # which block of queries
    bh = tl.program_id(1).to(tl.int64)  # which (batch, head)
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)  # the query rows of this program (some may be >= T_q)
    offs_n = tl.arange(0, BLOCK_N)  # key offsets inside a block
    offs_d = tl.arange(0, HEAD_DIM)
    k_base = K + bh * T_k * HEAD_DIM  # row j of this head's keys is k_base + j * HEAD_DIM
    v_base = V + bh * T_k * HEAD_DIM
    q = tl.load(Q + bh * T_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
                mask=offs_m[:, None] < T_q, other=0.0)  # (BLOCK_M, HEAD_DIM); rows past T_q read as 0
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running maximum of each row's scores
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp(score - m_i)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)  # running sum of exp(score - m_i) * v
    # --- the student's part ---
    # Key blocks [0, mid) are whole and (causal) entirely at or below the diagonal: no mask at all.
    # Blocks [mid, hi) are the partial last block and (causal) the ones crossing the diagonal: masked.
    # Causal blocks from hi on hold only keys after the tile's last query: skipped.
    mid = (T_k // BLOCK_N) * BLOCK_N
    hi = T_k
    if CAUSAL:
        mid = tl.minimum(mid, (start_m // BLOCK_N) * BLOCK_N)
        hi = tl.minimum(T_k, start_m + BLOCK_M)
    for start_n in range(0, mid, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_base + cols[:, None] * HEAD_DIM + offs_d[None, :])  # (BLOCK_N, HEAD_DIM)
        v = tl.load(v_base + cols[:, None] * HEAD_DIM + offs_d[None, :])
        s = tl.dot(q, tl.trans(k)) * sm_scale  # (BLOCK_M, BLOCK_N) scores, fp32
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)  # rescales what was summed under the old maximum
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    for start_n in range(mid, hi, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_base + cols[:, None] * HEAD_DIM + offs_d[None, :], mask=cols[:, None] < T_k, other=0.0)
        v = tl.load(v_base + cols[:, None] * HEAD_DIM + offs_d[None, :], mask=cols[:, None] < T_k, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        keep = cols[None, :] < T_k
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])  # top-left aligned: query i sees keys j <= i
        s = tl.where(keep, s, float("-inf"))
        # every row has seen key 0 by now (it is in the first block), so m_new is finite
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])  # exp(-inf) = 0: masked keys get weight exactly 0
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]  # normalise once, at the end (FlashAttention-2)
    row_ok = offs_m < T_q
    tl.store(O + bh * T_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
             out.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + bh * T_q + offs_m, m_i + tl.log(l_i), mask=row_ok)


_JITTED: dict = {}


def library_in_interpreter() -> None:
    """Let kernels decorated from now on run in Triton's interpreter, whoever imported triton first.

    Part of ``triton.language`` (``tl.max``, ``tl.sum``, ``tl.rand``...) is itself written as ``@triton.jit``
    functions, decorated when triton is imported: for a GPU unless ``TRITON_INTERPRET=1`` was set then. PyTorch's
    compiler stack imports triton early (a dispatch mode is enough), so those modules are decorated again here
    (``importlib.reload``), with the variable set. Call it with ``TRITON_INTERPRET=1`` in the environment.
    """
    if type(tl.max).__name__ != "JITFunction":
        return  # imported in interpreter mode already
    for name, module in sorted(sys.modules.items()):
        if name.startswith("triton.language.") and module is not None and any(
                type(value).__name__ == "JITFunction" for value in vars(module).values()):
            importlib.reload(module)
    importlib.reload(tl)


def exercise_kernel(interpret: bool) -> object:
    """:func:`attention_forward_kernel` under ``triton.jit``: Triton's interpreter when ``interpret`` (CPU
    tensors), a GPU kernel otherwise. The interpreter reads ``TRITON_INTERPRET`` while it runs, too, so for
    it the variable is set to 1 for the rest of the process (as the notebook's setup cell does)."""
    _require_triton()
    if interpret not in _JITTED:
        if interpret:
            os.environ["TRITON_INTERPRET"] = "1"
            library_in_interpreter()
            _JITTED[interpret] = triton.jit(attention_forward_kernel)
        else:
            saved = os.environ.pop("TRITON_INTERPRET", None)
            try:
                _JITTED[interpret] = triton.jit(attention_forward_kernel)
            finally:
                if saved is not None:
                    os.environ["TRITON_INTERPRET"] = saved
    return _JITTED[interpret]


def launch_attention_forward(kernel, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The exercise's launcher: checks, allocation, grid, one launch of ``kernel``; ``(out, lse)``.

    ``q`` ``(B, h, T_q, d)``, ``k`` and ``v`` ``(B, h, T_k, d)``, one dtype (float32 or float16; bfloat16
    on a GPU), ``d`` in :data:`EXERCISE_HEAD_DIMS`. Returns ``out`` in ``q``'s dtype and ``lse`` in float32.
    The notebook's launcher cell is this function's body with the student's kernel.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (B, h, T, d); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, h, T_q, d = q.shape
    T_k = k.shape[2]
    if k.shape != (B, h, T_k, d) or v.shape != (B, h, T_k, d):
        raise ValueError(f"k and v must be (B, h, T_k, d) = (B, h, T_k, {d}); got {tuple(k.shape)}, {tuple(v.shape)}")
    if d not in EXERCISE_HEAD_DIMS or T_q == 0 or T_k == 0:
        raise ValueError(f"d must be one of {EXERCISE_HEAD_DIMS} and T_q, T_k >= 1; got d={d}, T_q={T_q}, T_k={T_k}")
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype among float32, float16, bfloat16; "
                         f"got {q.dtype}, {k.dtype}, {v.dtype}")
    block_m, block_n = EXERCISE_BLOCKS["cuda" if q.is_cuda else "interpreter"]
    q3, k3, v3 = (t.reshape(B * h, t.shape[2], d).contiguous() for t in (q, k, v))  # copies only when strided
    out = torch.empty_like(q3)
    lse = torch.empty((B * h, T_q), dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(T_q, block_m), B * h)
    kernel[grid](q3, k3, v3, out, lse, T_q, T_k, 1.0 / math.sqrt(d),
                 HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=bool(causal))
    return out.reshape(B, h, T_q, d), lse.reshape(B, h, T_q)


def triton_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The exercise's function with the answer-key kernel: ``(out, lse)`` as :func:`launch_attention_forward`."""
    return launch_attention_forward(exercise_kernel(not q.is_cuda), q, k, v, causal)
