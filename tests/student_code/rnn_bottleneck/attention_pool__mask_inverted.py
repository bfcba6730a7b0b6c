import torch


def attention_pool(scores, values, mask=None):
    """nn.MultiheadAttention's polarity (True = ignore) instead of the course's (True = may attend)."""
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    context = (weights.unsqueeze(1) @ values).squeeze(1)
    return context, weights
