import math

import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    """Views the fused projection as (B, T, 3, h, d_head) and permutes q, k, v to the front."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.h = n_heads
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None, return_weights=False):
        B, T, D = x.shape
        d = D // self.h
        qkv = self.qkv_proj(x).view(B, T, 3, self.h, d).permute(2, 0, 3, 1, 4)  # (3, B, h, T, d)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(d)
        if mask is not None:
            scores = scores.masked_fill(mask.logical_not(), float("-inf"))
        weights = scores.softmax(dim=-1)
        out = torch.einsum("bhij,bhjd->bihd", weights, v).reshape(B, T, D)
        out = self.out_proj(out)
        return (out, weights) if return_weights else out
