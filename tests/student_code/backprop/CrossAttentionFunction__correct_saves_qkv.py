import math

import torch


class CrossAttentionFunction(torch.autograd.Function):
    """Keeps q, k, v instead of recomputing them, and writes the weight gradients with flattened batches."""

    @staticmethod
    def forward(ctx, x, y, W_q, W_k, W_v):
        q, k, v = x @ W_q, y @ W_k, y @ W_v
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        ctx.save_for_backward(x, y, W_q, W_k, W_v, q, k, v, weights)
        return weights @ v

    @staticmethod
    def backward(ctx, grad_out):
        x, y, W_q, W_k, W_v, q, k, v, weights = ctx.saved_tensors
        scale = 1 / math.sqrt(q.shape[-1])
        grad_v = weights.transpose(-2, -1) @ grad_out
        grad_weights = grad_out @ v.transpose(-2, -1)
        grad_scores = weights * (grad_weights - (grad_weights * weights).sum(-1, keepdim=True))
        grad_q = grad_scores @ k * scale
        grad_k = grad_scores.transpose(-2, -1) @ q * scale

        def weight_grad(inp, grad):  # sum inp^T grad over every sequence of the batch
            return inp.reshape(-1, inp.shape[-1]).T @ grad.reshape(-1, grad.shape[-1])

        return (grad_q @ W_q.T, grad_k @ W_k.T + grad_v @ W_v.T,
                weight_grad(x, grad_q), weight_grad(y, grad_k), weight_grad(y, grad_v))
