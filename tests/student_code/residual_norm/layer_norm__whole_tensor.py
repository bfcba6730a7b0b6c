import torch


def layer_norm(x, gamma, beta, eps=1e-5):
    """One mean and one variance for the whole tensor instead of one per token."""
    mean = x.mean()
    var = ((x - mean) ** 2).mean()
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta
