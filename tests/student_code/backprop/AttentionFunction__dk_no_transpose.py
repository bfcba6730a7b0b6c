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
        return grad_scores @ k * scale, grad_scores @ q * scale, grad_v
