def softmax_backward(grad_p, p, dim=-1):
    weighted = (grad_p * p).sum(dim=dim)  # one number per slice, but the summed axis is gone
    return p * (grad_p - weighted)
