import torch


def masked_softmax(scores, mask, dim=-1):
    """Softmax over the entries where mask is True; fully masked slices give zeros, never NaN."""
    bias = torch.zeros_like(scores).masked_fill(~mask, float("-inf"))
    return torch.nan_to_num(torch.softmax(scores + bias, dim=dim), nan=0.0)
