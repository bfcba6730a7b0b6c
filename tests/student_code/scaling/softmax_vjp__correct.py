

def softmax_vjp(p, grad_p, dim=-1):
    """dL/ds = p * (g - <p, g>) for p = softmax(s, dim), without the Jacobian."""
    if p.dim() == 0 or grad_p.shape != p.shape:
        raise ValueError("p must be at least 1-d and grad_p of p's shape")
    inner = (p * grad_p).sum(dim=dim, keepdim=True)
    return p * (grad_p - inner)
