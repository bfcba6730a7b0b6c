import torch


def softmax_backward(grad_p, p, dim=-1):
    """Builds the full Jacobian diag(p) - p p^T of every slice and multiplies (slow but right)."""
    p_last = p.movedim(dim, -1)
    g_last = grad_p.movedim(dim, -1)
    jacobian = torch.diag_embed(p_last) - p_last.unsqueeze(-1) * p_last.unsqueeze(-2)  # (..., n, n)
    grad_s = (g_last.unsqueeze(-2) @ jacobian).squeeze(-2)
    return grad_s.movedim(-1, dim)
