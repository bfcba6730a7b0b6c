import math


def variance_z_test(estimates, d_k, n_samples, alpha=1e-6):
    """z-test through the two-sided p-value, written with the standard library on a list of floats."""
    values = [float(v) for v in estimates.reshape(-1).tolist()]
    if not values:
        raise ValueError("no estimate")
    if d_k < 1:
        raise ValueError("d_k must be >= 1")
    if n_samples < 2:
        raise ValueError("n_samples must be >= 2")
    if alpha <= 0 or alpha >= 1:
        raise ValueError("alpha must be in (0, 1)")
    m = len(values)
    mu_4 = 3 * d_k ** 2 + 6 * d_k                      # E[(q . k)^4]
    var_s2 = mu_4 / n_samples - d_k ** 2 * (n_samples - 3) / (n_samples * (n_samples - 1))
    z = (math.fsum(values) / m - d_k) * math.sqrt(m / var_s2)
    p_value = math.erfc(abs(z) / math.sqrt(2))         # P(|Z| >= |z|)
    return float(z), bool(p_value < alpha)
