import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    """Attention scaled by 1/d_k instead of 1/sqrt(d_k)."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
