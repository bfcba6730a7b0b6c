import math
from statistics import NormalDist


def variance_z_test(estimates, d_k, n_samples, alpha=1e-6):
    """Two-sided z-test of H0: Var(q . k) = d_k from M independent estimates."""
    if estimates.numel() == 0 or d_k < 1 or n_samples < 2 or not 0 < alpha < 1:
        raise ValueError("need estimates, d_k >= 1, n_samples >= 2 and 0 < alpha < 1")
    d, n = float(d_k), float(n_samples)
    se = math.sqrt((3 * d * d + 6 * d) / n - d * d * (n - 3) / (n * (n - 1)))
    x = estimates.double()
    z = (x.mean().item() - d) / (se / math.sqrt(x.numel()))
    critical = -NormalDist().inv_cdf(alpha / 2)  # = inv_cdf(1 - alpha / 2), which rounds to 1.0 for tiny alpha
    return z, abs(z) > critical
