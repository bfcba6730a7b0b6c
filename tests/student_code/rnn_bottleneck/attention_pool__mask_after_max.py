import torch


def attention_pool(scores, values, mask=None):
    """Subtracts the maximum over *all* positions and multiplies by the mask after exp: when a masked
    position holds the largest score, every allowed weight underflows to 0 and the row becomes 0/0."""
    e = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
    if mask is not None:
        e = e * mask
    weights = e / e.sum(dim=-1, keepdim=True)
    context = (weights.unsqueeze(1) @ values).squeeze(1)
    return context, weights
