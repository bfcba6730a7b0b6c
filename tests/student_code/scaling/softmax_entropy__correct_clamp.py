def softmax_entropy(p, dim=-1):
    """Entropy in nats of the distributions p along dim, with 0 log 0 = 0."""
    return -(p * p.clamp_min(1e-30).log()).sum(dim=dim)
