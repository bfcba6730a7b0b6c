import math


def attention_backward(grad_out, q, k, v, weights):
    scale = 1 / math.sqrt(q.shape[-1])
    grad_v = weights.transpose(-2, -1) @ grad_out
    grad_weights = grad_out @ v.transpose(-2, -1)
    grad_scores = weights * (grad_weights - (grad_weights * weights).sum(dim=-1, keepdim=True))
    grad_q = grad_scores @ k * scale
    grad_k = grad_scores @ q * scale  # the same pattern as grad_q, with q in place of k
    return grad_q, grad_k, grad_v
