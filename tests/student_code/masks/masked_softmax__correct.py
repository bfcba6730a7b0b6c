import torch


def masked_softmax(scores, mask, dim=-1):
    """Softmax over the entries where mask is True; fully masked slices give zeros, never NaN."""
    filled = scores.masked_fill(~mask, float("-inf"))
    shift = filled.amax(dim=dim, keepdim=True).detach()
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    e = torch.exp(filled - shift)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))
