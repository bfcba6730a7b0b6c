import torch


def attention_pool(scores, values, mask=None):
    """exp(scores) / sum(exp(scores)) without subtracting the maximum: overflows for large scores."""
    e = torch.exp(scores)
    if mask is not None:
        e = e * mask
    weights = e / e.sum(dim=-1, keepdim=True)
    context = (weights.unsqueeze(1) @ values).squeeze(1)
    return context, weights
