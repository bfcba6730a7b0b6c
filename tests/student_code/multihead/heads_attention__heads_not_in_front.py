import math

import torch


def heads_attention(q, k, v, n_heads, mask=None):
    """Reshapes to (..., T, h, d_head) and attends without the transpose: the heads of one token attend
    to each other instead of the tokens."""
    *lead, T_q, d_model = q.shape
    d_head = d_model // n_heads
    qh = q.reshape(*lead, T_q, n_heads, d_head)
    kh = k.reshape(*k.shape[:-1], n_heads, d_head)
    vh = v.reshape(*v.shape[:-1], n_heads, d_head)
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(d_head)  # (..., T, h, h)
    weights = torch.softmax(scores, dim=-1)
    return (weights @ vh).reshape(*lead, T_q, d_model), weights
