import torch


def masked_softmax(scores, mask, dim=-1):
    """Softmax over the entries where mask is True; fully masked slices give zeros, never NaN."""
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=dim)
    has_key = mask.expand(scores.shape).any(dim=dim, keepdim=True)
    return torch.where(has_key, weights, torch.zeros_like(weights))
