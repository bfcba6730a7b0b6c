import torch


def softmax(x, dim=-1):
    """Numerically stable softmax of x along dim."""
    shifted = x - torch.max(x, dim=dim, keepdim=True).values
    numerator = torch.exp(shifted)
    return numerator / torch.sum(numerator, dim=dim, keepdim=True)
