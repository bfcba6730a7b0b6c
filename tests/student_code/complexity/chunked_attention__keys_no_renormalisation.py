import math

import torch


def chunked_attention(q, k, v, chunk_size, mask=None):
    """Splits the keys, takes a softmax inside each block and averages the blocks' outputs."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    if mask is not None and mask.dim() < 2:
        mask = mask.expand(T_q, T_k)
    outs = []
    for start in range(0, T_k, chunk_size):
        s = q @ k[..., start:start + chunk_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask[..., start:start + chunk_size], float("-inf"))
        outs.append(torch.softmax(s, dim=-1).nan_to_num(0.0) @ v[..., start:start + chunk_size, :])
    return sum(outs) / len(outs)
