import torch


def softmax_backward(grad_p, p, dim=-1):
    """Moves the softmax axis last, takes <p, dp> with einsum and broadcasts it back."""
    p_last, g_last = p.movedim(dim, -1), grad_p.movedim(dim, -1)
    inner = torch.einsum("...i,...i->...", p_last, g_last)  # (...), one per slice
    return (p_last * (g_last - inner.unsqueeze(-1))).movedim(-1, dim)
