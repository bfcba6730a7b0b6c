import torch


def scaled_dot_product_attention(q, k, v, mask=None):
    """Attention that forgets the 1/sqrt(d_k) scale."""
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
