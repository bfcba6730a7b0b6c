import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    """Masks by boolean indexing over the last two axes: fine for (T_q, T_k) masks only."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores[..., ~mask] = float("-inf")
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
