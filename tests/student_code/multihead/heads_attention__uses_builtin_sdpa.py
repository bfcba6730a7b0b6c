import math

import torch
import torch.nn.functional as F


def heads_attention(q, k, v, n_heads, mask=None):
    """Right values, but the output comes from F.scaled_dot_product_attention (the weights by hand)."""
    *lead, T_q, d_model = q.shape
    d_head = d_model // n_heads

    def split(t):
        return t.reshape(*t.shape[:-1], n_heads, d_head).transpose(-3, -2)

    qh, kh, vh = split(q), split(k), split(v)
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(d_head)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return out.transpose(-3, -2).reshape(*lead, T_q, d_model), weights
