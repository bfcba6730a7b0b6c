import torch


def layer_norm(x, gamma, beta, eps=1e-5):
    """Centres x in place, changing the caller's tensor."""
    x -= x.mean(dim=-1, keepdim=True)
    var = (x * x).mean(dim=-1, keepdim=True)
    return gamma * x / torch.sqrt(var + eps) + beta
