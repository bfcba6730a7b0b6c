def attention_backward(grad_out, q, k, v, weights):
    # the scale only matters in the forward pass, doesn't it?
    grad_v = weights.transpose(-2, -1) @ grad_out
    grad_weights = grad_out @ v.transpose(-2, -1)
    grad_scores = weights * (grad_weights - (grad_weights * weights).sum(dim=-1, keepdim=True))
    grad_q = grad_scores @ k
    grad_k = grad_scores.transpose(-2, -1) @ q
    return grad_q, grad_k, grad_v
