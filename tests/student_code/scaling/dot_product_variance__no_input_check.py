import torch


def dot_product_variance(d_k, n_samples=10000, generator=None):
    """Unbiased sample variance of q . k over n_samples pairs q, k ~ N(0, I_{d_k})."""
    q = torch.randn(n_samples, d_k, generator=generator)
    k = torch.randn(n_samples, d_k, generator=generator)
    return (q * k).sum(dim=-1).var().item()
