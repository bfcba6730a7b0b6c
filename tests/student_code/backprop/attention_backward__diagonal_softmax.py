import math


def attention_backward(grad_out, q, k, v, weights):
    scale = 1 / math.sqrt(q.shape[-1])
    grad_v = weights.transpose(-2, -1) @ grad_out
    grad_weights = grad_out @ v.transpose(-2, -1)
    grad_scores = grad_weights * weights * (1 - weights)  # softmax treated like an elementwise sigmoid
    grad_q = grad_scores @ k * scale
    grad_k = grad_scores.transpose(-2, -1) @ q * scale
    return grad_q, grad_k, grad_v
