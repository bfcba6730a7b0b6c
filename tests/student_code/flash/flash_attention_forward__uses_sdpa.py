import math

import torch
import torch.nn.functional as F


def flash_attention_forward(q, k, v, block_q=64, block_k=64, causal=False):
    """Tiled exact attention: returns (out (..., T_q, d_v), lse (..., T_q))."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    outs, lses = [], []
    for i in range(0, T_q, block_q):
        qi = q[..., i:i + block_q, :]
        rows = torch.arange(i, i + qi.shape[-2])[:, None]
        parts, part_lses = [], []
        for j in range(0, T_k, block_k):
            if causal and j > i + qi.shape[-2] - 1:
                break
            kj, vj = k[..., j:j + block_k, :], v[..., j:j + block_k, :]
            mask = torch.arange(j, j + kj.shape[-2])[None, :] <= rows if causal else None
            s = qi @ kj.transpose(-2, -1) * scale
            if causal:
                s = s.masked_fill(~mask, -math.inf)
            part_lses.append(torch.logsumexp(s, dim=-1))
            # the built-in attends within the tile; the tiles are merged with their log-sum-exps
            parts.append(torch.nan_to_num(F.scaled_dot_product_attention(qi, kj, vj, attn_mask=mask)))
        lse = torch.logsumexp(torch.stack(part_lses), dim=0)
        outs.append(sum(torch.exp(pl - lse)[..., None] * p for pl, p in zip(part_lses, parts)))
        lses.append(lse)
    return torch.cat(outs, dim=-2), torch.cat(lses, dim=-1)
