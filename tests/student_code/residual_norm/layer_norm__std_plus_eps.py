def layer_norm(x, gamma, beta, eps=1e-5):
    """Divides by (std + eps), as many blog posts print it."""
    mean = x.mean(dim=-1, keepdim=True)
    std = x.std(dim=-1, keepdim=True, unbiased=False)
    return gamma * (x - mean) / (std + eps) + beta
