import torch


def layer_norm(x, gamma, beta, eps=1e-5):
    """Normalises over the batch/first dimension, like BatchNorm, instead of over the features."""
    mean = x.mean(dim=0, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=0, keepdim=True)
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta
