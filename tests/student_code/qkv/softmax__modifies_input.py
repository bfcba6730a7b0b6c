import torch


def softmax(x, dim=-1):
    """Stable softmax that subtracts the max in place, changing the caller's tensor."""
    x -= x.amax(dim=dim, keepdim=True)
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)
