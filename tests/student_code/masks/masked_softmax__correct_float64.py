import torch


def masked_softmax(scores, mask, dim=-1):
    """Softmax over the entries where mask is True; fully masked slices give zeros, never NaN."""
    s = torch.where(mask, scores.double(), torch.tensor(float("-inf"), dtype=torch.float64))
    top = s.amax(dim=dim, keepdim=True)
    top = torch.where(top == float("-inf"), torch.zeros_like(top), top).detach()
    e = torch.where(mask, torch.exp(s - top), torch.zeros_like(s))
    total = e.sum(dim=dim, keepdim=True)
    return (e / total.clamp_min(torch.finfo(torch.float64).tiny)).to(scores.dtype)
