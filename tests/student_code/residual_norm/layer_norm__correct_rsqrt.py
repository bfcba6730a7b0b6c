import torch


def layer_norm(x, gamma, beta, eps=1e-5):
    """Mean and variance written out, multiplied by rsqrt, in float64 throughout, rounded once."""
    x64 = x.double()
    mu = x64.mean(-1, keepdim=True)
    var = ((x64 - mu) ** 2).mean(-1, keepdim=True)
    x_hat = (x64 - mu) * torch.rsqrt(var + eps)
    return (x_hat * gamma.double() + beta.double()).to(x.dtype)
