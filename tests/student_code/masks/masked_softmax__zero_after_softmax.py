import torch


def masked_softmax(scores, mask, dim=-1):
    """Softmax over the entries where mask is True; fully masked slices give zeros, never NaN."""
    return torch.softmax(scores, dim=dim) * mask
