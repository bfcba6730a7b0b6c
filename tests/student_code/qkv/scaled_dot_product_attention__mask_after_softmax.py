import math

import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    """Attention that zeroes masked weights after the softmax (rows no longer sum to 1)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask
    return weights @ v, weights
