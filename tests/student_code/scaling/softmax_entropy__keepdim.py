import torch


def softmax_entropy(p, dim=-1):
    """Entropy in nats of the distributions p along dim, with 0 log 0 = 0."""
    return -torch.special.xlogy(p, p).sum(dim=dim, keepdim=True)
