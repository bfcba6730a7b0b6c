import torch


def softmax_jacobian(p):
    """J[..., i, j] = dp_i / ds_j = p_i (delta_ij - p_j), for p = softmax(s) along the last axis."""
    n = p.shape[-1]
    flat = p.reshape(-1, n)
    J = torch.zeros(flat.shape[0], n, n, dtype=p.dtype)
    for b in range(flat.shape[0]):
        for i in range(n):
            for j in range(n):
                delta = 1.0 if i == j else 0.0
                J[b, i, j] = flat[b, i] * (delta - flat[b, j])
    return J.reshape(*p.shape, n)
