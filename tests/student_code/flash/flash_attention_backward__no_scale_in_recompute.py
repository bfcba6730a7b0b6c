import math

import torch


def flash_attention_backward(grad_out, q, k, v, out, lse, block_q=64, block_k=64, causal=False):
    """Gradients (dq, dk, dv) of attention, recomputing P tile by tile from lse."""
    T_q, T_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d)
    D = (grad_out * out).sum(dim=-1)  # (..., T_q)
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    for j in range(0, T_k, block_k):
        kj, vj = k[..., j:j + block_k, :], v[..., j:j + block_k, :]
        for i in range(0, T_q, block_q):
            qi, doi = q[..., i:i + block_q, :], grad_out[..., i:i + block_q, :]
            s = qi @ kj.transpose(-2, -1)
            if causal:
                rows = torch.arange(i, i + qi.shape[-2])[:, None]
                cols = torch.arange(j, j + kj.shape[-2])[None, :]
                s = s.masked_fill(cols > rows, -math.inf)
            p = torch.exp(s - lse[..., i:i + block_q].unsqueeze(-1))
            dv[..., j:j + block_k, :] += p.transpose(-2, -1) @ doi
            dp = doi @ vj.transpose(-2, -1)
            ds = p * (dp - D[..., i:i + block_q].unsqueeze(-1))
            dq[..., i:i + block_q, :] += ds @ kj * scale
            dk[..., j:j + block_k, :] += ds.transpose(-2, -1) @ qi * scale
    return dq, dk, dv
