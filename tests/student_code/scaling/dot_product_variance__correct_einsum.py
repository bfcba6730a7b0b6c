import torch


def dot_product_variance(d_k, n_samples=10000, generator=None):
    """Unbiased sample variance of q . k over n_samples pairs q, k ~ N(0, I_{d_k})."""
    if d_k < 1:
        raise ValueError("d_k must be positive")
    if n_samples < 2:
        raise ValueError("the unbiased variance needs at least two samples")
    qk = torch.randn(2, n_samples, d_k, generator=generator, dtype=torch.float64)
    scores = torch.einsum("nd,nd->n", qk[0], qk[1])
    mean = scores.mean()
    return float(((scores - mean) ** 2).sum() / (n_samples - 1))
