def softmax_backward(grad_p, p, dim=-1):
    """ds_j = p_j (dp_j - sum_i p_i dp_i): one weighted sum per slice."""
    weighted = (grad_p * p).sum(dim=dim, keepdim=True)
    return p * (grad_p - weighted)
