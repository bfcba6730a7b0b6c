import torch


def attention_pool(scores, values, mask=None):
    """Writes -inf into the caller's scores tensor: right values, but the argument is modified."""
    if mask is not None:
        scores[~mask] = float("-inf")
    weights = torch.softmax(scores, dim=-1)
    context = (weights.unsqueeze(1) @ values).squeeze(1)
    return context, weights
