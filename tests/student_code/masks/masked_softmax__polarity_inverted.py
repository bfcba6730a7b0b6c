import torch


def masked_softmax(scores, mask, dim=-1):
    """Softmax over the entries where mask is True; fully masked slices give zeros, never NaN."""
    weights = torch.softmax(scores.masked_fill(mask, -1e9), dim=dim)
    return weights * ~mask
