import math

import torch


def chunked_attention(q, k, v, chunk_size, mask=None):
    """Every chunk uses the mask rows of the first chunk."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-2], T_q, T_k) if mask.dim() >= 2 else mask.expand(T_q, T_k)
    outputs = []
    for start in range(0, T_q, chunk_size):
        q_chunk = q[..., start:start + chunk_size, :]
        scores = q_chunk @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask[..., :q_chunk.shape[-2], :], float("-inf"))
        outputs.append(torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v)
    return torch.cat(outputs, dim=-2)
