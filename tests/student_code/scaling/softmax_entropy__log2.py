import torch


def softmax_entropy(p, dim=-1):
    """Entropy in nats of the distributions p along dim, with 0 log 0 = 0."""
    plogp = torch.where(p > 0, p * torch.log2(p), torch.zeros_like(p))
    return -plogp.sum(dim=dim)
