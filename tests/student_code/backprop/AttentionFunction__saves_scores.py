import math

import torch


class AttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        ctx.save_for_backward(q, k, v, scores)  # the scores, not the weights
        return torch.softmax(scores, dim=-1) @ v

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, weights = ctx.saved_tensors  # ...then used as if they were the weights
        scale = 1 / math.sqrt(q.shape[-1])
        grad_v = weights.transpose(-2, -1) @ grad_out
        grad_weights = grad_out @ v.transpose(-2, -1)
        grad_scores = weights * (grad_weights - (grad_weights * weights).sum(dim=-1, keepdim=True))
        return grad_scores @ k * scale, grad_scores.transpose(-2, -1) @ q * scale, grad_v
