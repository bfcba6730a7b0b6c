import math

import torch


def flash_attention_forward(q, k, v, block_q=64, block_k=64, causal=False):
    """Tiled exact attention: returns (out (..., T_q, d_v), lse (..., T_q))."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    outs, lses = [], []
    for i in range(0, T_q, block_q):
        s = q[..., i:i + block_q, :] @ k.transpose(-2, -1) * scale  # a block of queries against ALL keys
        if causal:
            rows = torch.arange(i, min(i + block_q, T_q))[:, None]
            s = s.masked_fill(torch.arange(T_k)[None, :] > rows, -math.inf)
        m = s.amax(-1, keepdim=True)
        e = torch.exp(s - m)
        l = e.sum(-1, keepdim=True)
        outs.append(e @ v / l)
        lses.append((m + torch.log(l)).squeeze(-1))
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
