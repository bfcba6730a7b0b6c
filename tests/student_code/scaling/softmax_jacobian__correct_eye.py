import torch


def softmax_jacobian(p):
    """J[..., i, j] = dp_i / ds_j = p_i (delta_ij - p_j), for p = softmax(s) along the last axis."""
    eye = torch.eye(p.shape[-1], dtype=p.dtype)
    return p.unsqueeze(-1) * (eye - p.unsqueeze(-2))
