import math

import torch


def heads_attention(q, k, v, n_heads, mask=None):
    """One head at a time, on the column blocks of q, k and v; the weights are stacked at the end."""
    d_head = q.shape[-1] // n_heads
    T_q, T_k = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = mask.expand(*q.shape[:-2], n_heads, T_q, T_k)
    outs, weights = [], []
    for i in range(n_heads):
        cols = slice(i * d_head, (i + 1) * d_head)
        scores = q[..., cols] @ k[..., cols].transpose(-2, -1) / math.sqrt(d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask[..., i, :, :], float("-inf"))
        w = torch.softmax(scores, dim=-1)
        outs.append(w @ v[..., cols])
        weights.append(w)
    return torch.cat(outs, dim=-1), torch.stack(weights, dim=-3)
