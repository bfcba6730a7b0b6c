import torch


def softmax(x, dim=-1):
    """Numerically stable softmax of x along dim, via the log-sum-exp."""
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))
