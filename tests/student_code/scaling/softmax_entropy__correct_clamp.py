import torch


def softmax_entropy(p, dim=-1):
    """Entropy in nats of the distributions p along dim, with 0 log 0 = 0."""
    # the smallest positive normal number of p's own dtype: 0 * log(tiny) = 0, and tiny exists in every dtype
    return -(p * p.clamp_min(torch.finfo(p.dtype).tiny).log()).sum(dim=dim)
