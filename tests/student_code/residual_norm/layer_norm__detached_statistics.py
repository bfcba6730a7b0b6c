import torch


def layer_norm(x, gamma, beta, eps=1e-5):
    """Right values, but treats the mean and variance as constants for autograd."""
    with torch.no_grad():
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta
