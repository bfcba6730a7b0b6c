import math

import torch


def heads_attention(q, k, v, n_heads, mask=None):
    """Splits with a reshape straight to (..., h, T, d_head) (no transpose), merges correctly; any
    number of leading dims."""
    *lead, T_q, d_model = q.shape
    d_head = d_model // n_heads

    def split(t):
        return t.reshape(*t.shape[:-2], n_heads, t.shape[-2], d_head)

    qh, kh, vh = split(q), split(k), split(v)
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(d_head)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = (weights @ vh).transpose(-3, -2)
    return out.reshape(*lead, T_q, d_model), weights
