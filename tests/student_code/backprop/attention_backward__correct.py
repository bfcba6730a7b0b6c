import math


def attention_backward(grad_out, q, k, v, weights):
    scale = 1 / math.sqrt(q.shape[-1])
    grad_v = weights.transpose(-2, -1) @ grad_out                   # (..., T_k, d_v)
    grad_weights = grad_out @ v.transpose(-2, -1)                   # (..., T_q, T_k)
    row = (grad_weights * weights).sum(dim=-1, keepdim=True)        # (..., T_q, 1)
    grad_scores = weights * (grad_weights - row)                    # (..., T_q, T_k)
    grad_q = grad_scores @ k * scale                                # (..., T_q, d_k)
    grad_k = grad_scores.transpose(-2, -1) @ q * scale              # (..., T_k, d_k)
    return grad_q, grad_k, grad_v
