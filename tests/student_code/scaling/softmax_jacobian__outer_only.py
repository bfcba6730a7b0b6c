def softmax_jacobian(p):
    """J[..., i, j] = dp_i / ds_j = p_i (delta_ij - p_j), for p = softmax(s) along the last axis."""
    return -p.unsqueeze(-1) * p.unsqueeze(-2)
