import math

import torch


def heads_attention(q, k, v, n_heads, mask=None):
    """Split into heads, attend in all heads at once, merge; written out in full."""
    d_model = q.shape[-1]
    if d_model % n_heads:
        raise ValueError("n_heads must divide d_model")
    d_head = d_model // n_heads

    def split(t):  # (..., T, d_model) -> (..., h, T, d_head)
        return t.reshape(*t.shape[:-1], n_heads, d_head).transpose(-3, -2)

    qh, kh, vh = split(q), split(k), split(v)
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(d_head)  # (..., h, T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = (weights @ vh).transpose(-3, -2)  # (..., T_q, h, d_head)
    return out.reshape(*out.shape[:-2], d_model), weights
