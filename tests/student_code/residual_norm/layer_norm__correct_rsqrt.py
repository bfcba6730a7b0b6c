import torch


def layer_norm(x, gamma, beta, eps=1e-5):
    """Mean and variance written out, multiplied by rsqrt."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    x_hat = (x - mu) * torch.rsqrt(var + eps)
    return x_hat * gamma + beta
