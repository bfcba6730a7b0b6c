import math

import torch


def heads_attention(q, k, v, n_heads, mask=None):
    """Gives head i the features i, i + h, i + 2h, ... instead of a block of consecutive features."""
    *lead, T_q, d_model = q.shape
    d_head = d_model // n_heads

    def split(t):  # (..., T, d_head, h) -> (..., h, T, d_head)
        return t.reshape(*t.shape[:-1], d_head, n_heads).movedim(-1, -3)

    qh, kh, vh = split(q), split(k), split(v)
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(d_head)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = (weights @ vh).movedim(-3, -1)  # (..., T, d_head, h)
    return out.reshape(*lead, T_q, d_model), weights
