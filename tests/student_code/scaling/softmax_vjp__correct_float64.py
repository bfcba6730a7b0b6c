import torch


def softmax_vjp(p, grad_p, dim=-1):
    """Computed in float64 along the last axis (moved there), rounded back to p's dtype."""
    if p.ndim == 0:
        raise ValueError("p is 0-d")
    if tuple(grad_p.shape) != tuple(p.shape):
        raise ValueError(f"grad_p has shape {tuple(grad_p.shape)}, p {tuple(p.shape)}")
    p64 = p.movedim(dim, -1).to(torch.float64)
    g64 = grad_p.movedim(dim, -1).to(torch.float64)
    weighted_mean = torch.einsum("...n,...n->...", p64, g64).unsqueeze(-1)
    out = p64 * g64 - p64 * weighted_mean
    return out.movedim(-1, dim).to(p.dtype)
