import torch


def attention_pool(scores, values, mask=None):
    """Zeroes the masked weights after the softmax, so the remaining ones no longer sum to 1."""
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask
    context = (weights.unsqueeze(1) @ values).squeeze(1)
    return context, weights
