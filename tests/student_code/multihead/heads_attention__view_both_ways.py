import math

import torch


def heads_attention(q, k, v, n_heads, mask=None):
    """view to (..., h, T, d_head) and view back: consistent, so it looks like an inverse, but each head
    now sees only a run of consecutive tokens."""
    *lead, T_q, d_model = q.shape
    T_k, d_head = k.shape[-2], d_model // n_heads
    qh = q.reshape(*lead, n_heads, T_q, d_head)
    kh = k.reshape(*lead, n_heads, T_k, d_head)
    vh = v.reshape(*lead, n_heads, T_k, d_head)
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(d_head)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights @ vh).reshape(*lead, T_q, d_model), weights
