import torch


def masked_softmax(scores, mask, dim=-1):
    """Softmax over the entries where mask is True; fully masked slices give zeros, never NaN."""
    lowest = torch.finfo(scores.dtype).min  # the most negative number the dtype holds: float16 too
    weights = torch.softmax(scores.masked_fill(~mask, lowest), dim=dim)
    return weights * mask  # rows with no True entry were uniform: zero them
