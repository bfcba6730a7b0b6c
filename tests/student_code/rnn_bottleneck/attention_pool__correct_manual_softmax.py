import torch


def attention_pool(scores, values, mask=None):
    """A hand-written stable softmax: subtract the row maximum, exponentiate, normalise."""
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
    z = scores - scores.max(dim=-1, keepdim=True).values
    e = torch.exp(z)
    weights = e / e.sum(dim=-1, keepdim=True)
    context = (weights[:, :, None] * values).sum(dim=1)
    return context, weights
