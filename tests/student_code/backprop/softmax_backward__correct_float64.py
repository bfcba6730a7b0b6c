import torch


def softmax_backward(grad_p, p, dim=-1):
    """Computes ds = p * (dp - <p, dp>) in float64 whatever the inputs, then casts back to p's dtype."""
    p64, g64 = p.to(torch.float64), grad_p.to(torch.float64)
    inner = torch.sum(p64 * g64, dim=dim, keepdim=True)  # one number per slice
    return (p64 * (g64 - inner)).to(p.dtype)
