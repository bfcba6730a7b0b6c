import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d_k)) v with an optional boolean mask (True = may attend)."""
    scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    scores = scores - scores.amax(dim=-1, keepdim=True)
    weights = scores.exp()
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights
