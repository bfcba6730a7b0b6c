import math

import torch


def _weights(q, k):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    e = (scores - scores.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)


class AttentionFunction(torch.autograd.Function):
    """Saves only q, k, v and recomputes the (T_q, T_k) weights in the backward pass, like FlashAttention."""

    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return _weights(q, k) @ v

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        weights = _weights(q, k)
        scale = 1 / math.sqrt(q.shape[-1])
        grad_v = weights.transpose(-2, -1) @ grad_out
        grad_weights = grad_out @ v.transpose(-2, -1)
        grad_scores = weights * (grad_weights - (grad_weights * weights).sum(dim=-1, keepdim=True))
        grad_q = grad_scores @ k * scale
        grad_k = grad_scores.transpose(-2, -1) @ q * scale
        return grad_q, grad_k, grad_v
