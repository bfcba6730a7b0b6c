import math

import torch


def flash_attention_forward(q, k, v, block_q=64, block_k=64, causal=False):
    """Tiled exact attention: returns (out (..., T_q, d_v), lse (..., T_q))."""
    T_q, d = q.shape[-2], q.shape[-1]
    T_k = k.shape[-2]
    scale = 1.0 / math.sqrt(d)
    outs, lses = [], []
    for i in range(0, T_q, block_q):
        qi = q[..., i:i + block_q, :]
        bq = qi.shape[-2]
        m = torch.full(qi.shape[:-1], -math.inf, dtype=q.dtype)
        l = torch.zeros(qi.shape[:-1], dtype=q.dtype)
        acc = torch.zeros(*qi.shape[:-1], v.shape[-1], dtype=q.dtype)
        for j in range(0, T_k, block_k):
            kj, vj = k[..., j:j + block_k, :], v[..., j:j + block_k, :]
            s = qi @ kj.transpose(-2, -1) * scale
            if causal:
                rows = torch.arange(i, i + bq)[:, None] + (T_k - T_q)  # align the last query with the last key
                cols = torch.arange(j, j + kj.shape[-2])[None, :]
                s = s.masked_fill(cols > rows, -math.inf)
            m_new = torch.maximum(m, s.max(dim=-1).values)
            p = torch.exp(s - m_new.unsqueeze(-1))
            alpha = torch.exp(m - m_new)
            l = alpha * l + p.sum(dim=-1)
            acc = alpha.unsqueeze(-1) * acc + p @ vj
            m = m_new
        outs.append(acc / l.unsqueeze(-1))
        lses.append(m + torch.log(l))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
