import torch


def masked_softmax(scores, mask, dim=-1):
    """Softmax over the entries where mask is True; fully masked slices give zeros, never NaN."""
    weights = torch.softmax(scores, dim=dim) * mask
    return weights / weights.sum(dim=dim, keepdim=True).clamp_min(1e-12)
