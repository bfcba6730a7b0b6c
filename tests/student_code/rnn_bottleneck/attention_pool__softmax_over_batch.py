import torch


def attention_pool(scores, values, mask=None):
    """Softmax over dim=0, the batch, instead of over the positions."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=0)
    context = (weights.unsqueeze(1) @ values).squeeze(1)
    return context, weights
