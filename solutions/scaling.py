"""Chapter 3, why sqrt(d_k): the reference implementations.

In the chapter's order: measure the variance of a dot product of two random vectors (it grows like
``d_k``), with the standard error that tells how far a sampled estimate may honestly stray, and test
estimates against ``d_k`` with it (a z-test); the entropy of a softmax distribution (how spread out the
attention is); the softmax's Jacobian (how much gradient gets through it), and the vector-Jacobian
product that back-propagates through a softmax without ever forming that Jacobian. Together they show what happens to attention without the ``1/sqrt(d_k)`` scale: the
scores grow with the width, the softmax saturates, its entropy and its Jacobian go to zero.

Every function returns new tensors (or a Python float) and leaves its arguments unchanged.
"""

from __future__ import annotations

import math

import torch


def dot_product_variance(d_k: int, n_samples: int = 10000, generator: torch.Generator | None = None) -> float:
    """Estimate ``Var(q . k)`` for ``q, k ~ N(0, I_{d_k})`` from ``n_samples`` independent pairs.

    Draws ``q`` and ``k`` as two ``(n_samples, d_k)`` standard-normal matrices from ``generator``, takes
    the ``n_samples`` dot products of matching rows and returns their unbiased sample variance (divisor
    ``n_samples - 1``). The true value is ``d_k``; the estimate's standard error is
    :func:`variance_standard_error`.

    Args:
        d_k: the width of the vectors, ``>= 1``.
        n_samples: the number of ``(q, k)`` pairs, ``>= 2`` (one value has no sample variance).
        generator: the ``torch.Generator`` to draw from, or None for PyTorch's global random stream.

    Returns:
        The estimate, a Python float.

    Raises:
        ValueError: when ``d_k < 1`` or ``n_samples < 2``.
        TypeError: when ``generator`` is neither None nor a ``torch.Generator``.
    """
    if d_k < 1:
        raise ValueError(f"d_k must be >= 1, got {d_k}")
    if n_samples < 2:
        raise ValueError(f"n_samples must be >= 2 for an unbiased sample variance, got {n_samples}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    q = torch.randn(n_samples, d_k, generator=generator, dtype=torch.float64)  # (n, d_k)
    k = torch.randn(n_samples, d_k, generator=generator, dtype=torch.float64)  # (n, d_k)
    scores = (q * k).sum(dim=-1)  # (n,): one dot product per pair
    return float(scores.var(correction=1))


def variance_standard_error(d_k: int, n_samples: int) -> float:
    """The exact standard deviation of :func:`dot_product_variance`'s estimate.

    For i.i.d. samples with variance ``sigma^2`` and fourth central moment ``mu_4`` the unbiased sample
    variance has ``Var(s^2) = mu_4 / n - sigma^4 (n - 3) / (n (n - 1))``. For ``x = q . k`` with
    ``q, k ~ N(0, I_d)``: ``sigma^2 = d`` and ``mu_4 = E[x^4] = 3 d^2 + 6 d``, so for large ``n`` the
    standard error is about ``sqrt((2 d^2 + 6 d) / n)``.
    """
    d, n = float(d_k), float(n_samples)
    mu_4 = 3.0 * d * d + 6.0 * d
    return math.sqrt(mu_4 / n - d * d * (n - 3.0) / (n * (n - 1.0)))


def variance_z_test(estimates, d_k: int, n_samples: int, alpha: float = 1e-6) -> tuple[float, bool]:
    """Two-sided z-test of ``H0: Var(q . k) = d_k`` from ``M`` independent estimates of the variance.

    Each estimate is an unbiased sample variance of ``n_samples`` dot products (what
    :func:`dot_product_variance` returns). Under ``H0`` one estimate has mean ``d_k`` and standard deviation
    ``se = variance_standard_error(d_k, n_samples)`` (exact, from the fourth moment ``3 d^2 + 6 d``); the
    mean of ``M`` independent ones has standard deviation ``se / sqrt(M)``. So
    ``z = (mean - d_k) / (se / sqrt(M))``, and ``H0`` is rejected when the two-sided normal tail
    ``P(|Z| >= |z|)`` is below ``alpha``, i.e. when ``|z| > Phi^{-1}(1 - alpha / 2) = -Phi^{-1}(alpha / 2)``, for
    any ``alpha`` in (0, 1) however small (``1 - alpha / 2`` rounds to 1.0 below about ``1e-16``, so the tail is
    computed directly, ``erfc(|z| / sqrt 2)``, which stays exact far below that).

    The normal law of the mean is an approximation: a sample variance is skewed to the right (skewness of the
    mean about ``2 sqrt(2 / (M n))`` for large ``d_k``, more for small ``d_k``), and the test's real level is
    ``alpha`` only when that skewness is small next to ``6 / c^3`` at the critical value ``c``.

    Args:
        estimates: a Python float, a sequence of floats, or a floating tensor of any shape (all its entries
            are the ``M`` estimates).
        d_k: the width under test, ``>= 1``.
        n_samples: how many pairs each estimate was computed from, ``>= 2``.
        alpha: the significance level, ``0 < alpha < 1``.

    Returns:
        ``(z, reject)``: a Python float and a Python bool.

    Raises:
        ValueError: when there is no estimate, ``d_k < 1``, ``n_samples < 2`` or ``alpha`` is not in (0, 1).
    """
    if d_k < 1:
        raise ValueError(f"d_k must be >= 1, got {d_k}")
    if n_samples < 2:
        raise ValueError(f"n_samples must be >= 2, got {n_samples}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha}")
    values = torch.as_tensor(estimates, dtype=torch.float64).reshape(-1)  # (M,)
    if values.numel() == 0:
        raise ValueError("no estimate to test")
    m = values.numel()
    se_mean = variance_standard_error(d_k, n_samples) / math.sqrt(m)  # sd of the mean of M estimates
    z = (float(values.mean()) - d_k) / se_mean
    tail = math.erfc(abs(z) / math.sqrt(2.0))  # P(|Z| >= |z|), two-sided: no 1 - alpha/2 to round to 1.0
    return z, bool(tail < alpha)


def softmax_entropy(p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Entropy in nats of the distributions ``p`` along ``dim``: ``H = -sum_j p_j log p_j``.

    Zero probabilities contribute nothing (``0 log 0 = 0``, the limit of ``x log x``), so one-hot rows
    have entropy exactly 0 and never NaN. A uniform distribution over ``n`` outcomes has entropy
    ``log n``, the maximum.

    Args:
        p: probabilities (non-negative, summing to 1 along ``dim``), any shape, floating dtype.
        dim: the axis that holds one distribution.

    Returns:
        ``p``'s shape without ``dim``, same dtype.
    """
    # xlogy(x, y) = x log y, defined as 0 where x == 0 (even where log y = -inf)
    return -torch.special.xlogy(p, p).sum(dim=dim)


def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """The Jacobian of ``p = softmax(s)`` along the last axis, from ``p``: ``J = diag(p) - p^T p``, p a row.

    ``J[..., i, j] = dp_i / ds_j = p_i (delta_ij - p_j)``. It is symmetric, its rows sum to zero (adding
    a constant to all scores changes nothing) and it vanishes when ``p`` is one-hot: a saturated
    softmax passes no gradient back.

    Args:
        p: softmax outputs ``(..., n)``, any number of leading batch dims.

    Returns:
        ``(..., n, n)``, same dtype.

    Raises:
        ValueError: when ``p`` is a scalar.
    """
    if p.dim() == 0:
        raise ValueError("p must have at least one dimension (..., n), got a scalar")
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)  # (..., n, n)


def softmax_vjp(p: torch.Tensor, grad_p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Back-propagate ``grad_p = dL/dp`` through ``p = softmax(s, dim)``: ``dL/ds = p * (g - <p, g>)``.

    ``g J`` with ``J = diag(p) - p^T p`` (symmetric) is ``p * g - p (p . g)``, computed without forming
    ``J``: two elementwise products and one sum along ``dim``, ``O(n)`` memory per distribution instead of
    ``O(n^2)``. This is the form the backward pass of attention uses (chapters 7 and 9).

    Args:
        p: softmax outputs, floating, any shape, the distributions along ``dim``.
        grad_p: the upstream gradient, same shape and dtype as ``p`` (any layout; mixed dtypes are not graded).
        dim: the axis of the softmax.

    Returns:
        ``dL/ds``: a new tensor of ``p``'s shape and dtype.

    Raises:
        ValueError: when ``grad_p`` does not have ``p``'s shape, or ``p`` is a scalar.
    """
    if p.dim() == 0:
        raise ValueError("p must have at least one dimension, got a scalar")
    if grad_p.shape != p.shape:
        raise ValueError(f"grad_p must have p's shape {tuple(p.shape)}, got {tuple(grad_p.shape)}")
    inner = (p * grad_p).sum(dim=dim, keepdim=True)  # <p, g> per distribution, dim kept for broadcasting
    return p * (grad_p - inner)
