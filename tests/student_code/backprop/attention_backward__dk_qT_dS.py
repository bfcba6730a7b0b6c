import math


def attention_backward(grad_out, q, k, v, weights):
    scale = 1 / math.sqrt(q.shape[-1])
    grad_v = weights.transpose(-2, -1) @ grad_out
    grad_weights = grad_out @ v.transpose(-2, -1)
    grad_scores = weights * (grad_weights - (grad_weights * weights).sum(dim=-1, keepdim=True))
    grad_q = grad_scores @ k * scale
    grad_k = q.transpose(-2, -1) @ grad_scores * scale  # "dL/dK = Q^T dL/dS", as a popular write-up has it
    return grad_q, grad_k, grad_v
