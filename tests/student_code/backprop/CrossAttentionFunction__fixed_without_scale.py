import math

import torch


class CrossAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y, W_q, W_k, W_v):
        q, k, v = x @ W_q, y @ W_k, y @ W_v
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        weights = torch.softmax(scores, dim=-1)
        ctx.save_for_backward(x, y, W_q, W_k, W_v, weights)
        return weights @ v

    @staticmethod
    def backward(ctx, grad_out):
        x, y, W_q, W_k, W_v, weights = ctx.saved_tensors
        q, k, v = x @ W_q, y @ W_k, y @ W_v
        scale = 1 / math.sqrt(q.shape[-1])
        grad_v = weights.transpose(-2, -1) @ grad_out
        grad_weights = grad_out @ v.transpose(-2, -1)
        grad_scores = weights * (grad_weights - (grad_weights * weights).sum(-1, keepdim=True))
        grad_q = grad_scores @ k * scale
        grad_k = grad_scores.transpose(-2, -1) @ q
        grad_x = grad_q @ W_q.T
        grad_y = grad_k @ W_k.T + grad_v @ W_v.T
        grad_W_q = torch.einsum("...ti,...tj->ij", x, grad_q)
        grad_W_k = torch.einsum("...ti,...tj->ij", y, grad_k)
        grad_W_v = torch.einsum("...ti,...tj->ij", y, grad_v)
        return grad_x, grad_y, grad_W_q, grad_W_k, grad_W_v
