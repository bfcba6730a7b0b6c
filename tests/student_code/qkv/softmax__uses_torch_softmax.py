import torch


def softmax(x, dim=-1):
    """Numerically stable softmax of x along dim."""
    return torch.softmax(x, dim=dim)
