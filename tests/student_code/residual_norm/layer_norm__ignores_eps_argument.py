import torch


def layer_norm(x, gamma, beta, eps=1e-5):
    """Hard-codes eps = 1e-5 instead of using the argument."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return gamma * (x - mean) / torch.sqrt(var + 1e-5) + beta
