import torch


def softmax_jacobian(p):
    """J[..., i, j] = dp_i / ds_j = p_i (delta_ij - p_j), for p = softmax(s) along the last axis."""
    return torch.diag_embed(p) - p.mT @ p if p.dim() > 1 else torch.diag(p) - torch.outer(p, p)
