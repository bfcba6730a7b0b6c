def softmax_backward(grad_p, p, dim=-1):
    # the derivative of a sigmoid, applied entry by entry
    return grad_p * p * (1 - p)
