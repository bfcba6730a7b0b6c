def triton_attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact attention softmax(q k^T / sqrt(d)) v by your Triton kernel below (given: do not change it).

    Args:
        q: queries (B, H, T_q, d); k, v: keys and values (B, H, T_k, d); one dtype, float32 or float16
            (bfloat16 too on a GPU); d one of 16, 32, 64, 128; any strides (strided inputs are copied).
        causal: query i attends to keys j <= i (top-left aligned, like F.scaled_dot_product_attention).

    Returns:
        (out, lse): out (B, H, T_q, d) in q's dtype; lse (B, H, T_q) float32, the natural-log
        log-sum-exp of each query's scaled (and masked) scores.
    """
    if not HAVE_TRITON:
        raise RuntimeError(TRITON_MISSING)
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be (B, H, T, d); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, H, T_q, d = q.shape
    T_k = k.shape[2]
    if k.shape != (B, H, T_k, d) or v.shape != (B, H, T_k, d):
        raise ValueError(f"k and v must be (B, H, T_k, d) = (B, H, T_k, {d}); got {tuple(k.shape)}, {tuple(v.shape)}")
    if d not in (16, 32, 64, 128) or T_q == 0 or T_k == 0:
        raise ValueError(f"d must be one of 16, 32, 64, 128 and T_q, T_k >= 1; got d={d}, T_q={T_q}, T_k={T_k}")
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k, v must share one dtype among float32, float16, bfloat16; "
                         f"got {q.dtype}, {k.dtype}, {v.dtype}")
    block_m, block_n = (64, 64) if q.is_cuda else (16, 32)  # fixed tiles: small ones for the interpreter
    q3, k3, v3 = (t.reshape(B * H, t.shape[2], d).contiguous() for t in (q, k, v))  # one head after another
    out = torch.empty_like(q3)
    lse = torch.empty(B * H, T_q, dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(T_q, block_m), B * H)  # one program per block of queries and (batch, head)
    attention_forward_kernel[grid](q3, k3, v3, out, lse, T_q, T_k, 1.0 / math.sqrt(d),
                                   HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=bool(causal))
    return out.reshape(B, H, T_q, d), lse.reshape(B, H, T_q)


@triton.jit
def attention_forward_kernel(
    Q, K, V, O, LSE,  # pointers: q, o (B*H, T_q, D); k, v (B*H, T_k, D), contiguous; lse (B*H, T_q) fp32
    T_q, T_k, sm_scale,  # lengths, and the score scale 1/sqrt(D)
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
):
    """One program: BLOCK_M queries of one (batch, head) against all its keys, BLOCK_N keys at a time.

    Write, after the given lines: the loop over key blocks with the online-softmax update of m_i, l_i and
    acc; the masking of the last, partial key block; with CAUSAL, the split into blocks that need no mask,
    blocks that cross the diagonal (masked) and blocks after it (skipped); then out = acc / l_i into O and
    lse = m_i + log(l_i) into LSE, for the rows < T_q only.
    """
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
    # one loop over the key blocks this tile can see; the masks cost nothing when they keep everything
    hi = tl.minimum(T_k, start_m + BLOCK_M) if CAUSAL else T_k
    for start_n in range(0, hi, BLOCK_N):
        keys = start_n + offs_n
        in_range = keys < T_k
        kt = tl.load(k_base + keys[None, :] * HEAD_DIM + offs_d[:, None], mask=in_range[None, :], other=0.0)
        vb = tl.load(v_base + keys[:, None] * HEAD_DIM + offs_d[None, :], mask=in_range[:, None], other=0.0)
        scores = tl.dot(q, kt) * sm_scale  # (BLOCK_M, BLOCK_N)
        visible = in_range[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= offs_m[:, None])
        scores = tl.where(visible, scores, float("-inf"))
        m_next = tl.maximum(m_i, tl.max(scores, axis=1))
        correction = tl.exp(m_i - m_next)
        weights = tl.exp(scores - m_next[:, None])
        l_i = correction * l_i + tl.sum(weights, axis=1)
        acc = correction[:, None] * acc + tl.dot(weights.to(vb.dtype), vb)
        m_i = m_next
    rows_ok = offs_m < T_q
    o_ptrs = O + bh * T_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(o_ptrs, (acc / l_i[:, None]).to(O.dtype.element_ty), mask=rows_ok[:, None])
    tl.store(LSE + bh * T_q + offs_m, m_i + tl.log(l_i), mask=rows_ok)
