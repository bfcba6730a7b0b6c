import math

import torch


def heads_attention(q, k, v, n_heads, mask=None):
    """The notebook's buggy version, handed in unchanged: view without transpose when splitting."""
    B, T_q, d_model = q.shape
    T_k, d_head = k.shape[1], d_model // n_heads
    qh = q.view(B, n_heads, T_q, d_head)
    kh = k.view(B, n_heads, T_k, d_head)
    vh = v.view(B, n_heads, T_k, d_head)
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(d_head)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = (weights @ vh).transpose(1, 2).reshape(B, T_q, d_model)
    return out, weights
