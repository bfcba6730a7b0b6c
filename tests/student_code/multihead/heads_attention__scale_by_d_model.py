import math

import torch


def heads_attention(q, k, v, n_heads, mask=None):
    """Scales every head's scores by 1/sqrt(d_model) instead of 1/sqrt(d_head)."""
    *lead, T_q, d_model = q.shape
    d_head = d_model // n_heads

    def split(t):
        return t.reshape(*t.shape[:-1], n_heads, d_head).transpose(-3, -2)

    qh, kh, vh = split(q), split(k), split(v)
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(d_model)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = (weights @ vh).transpose(-3, -2)
    return out.reshape(*lead, T_q, d_model), weights
