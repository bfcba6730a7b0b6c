import math

import torch


def chunked_attention(q, k, v, chunk_size, mask=None):
    """Chunked, but every chunk's weights are kept for a second pass: the whole matrix, in pieces."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    T_q = q.shape[-2]
    weights = []
    for start in range(0, T_q, chunk_size):
        s = q[..., start:start + chunk_size, :] @ k.transpose(-2, -1) * scale
        if mask is not None:
            m = torch.broadcast_to(mask, (*s.shape[:-2], T_q, k.shape[-2]))[..., start:start + chunk_size, :]
            s = s.masked_fill(~m, float("-inf"))
        w = torch.softmax(s, dim=-1)
        weights.append(torch.nan_to_num(w, nan=0.0))
    return torch.cat([w @ v for w in weights], dim=-2)
