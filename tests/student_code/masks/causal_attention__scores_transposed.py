import math

import torch


def causal_attention(q, k, v):
    """Causal self-attention: position i attends to positions 0..i only. Returns (..., T, d_v)."""
    T = q.shape[-2]
    scores = k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return weights @ v
