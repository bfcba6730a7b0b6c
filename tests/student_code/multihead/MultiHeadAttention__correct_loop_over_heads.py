import math

import torch
import torch.nn as nn


class MultiHeadAttention(nn.Module):
    """One head at a time on the column blocks of q, k and v (slow but right)."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        self.n_heads = n_heads
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None, return_weights=False):
        B, T, d_model = x.shape
        d_head = d_model // self.n_heads
        q, k, v = self.qkv_proj(x).split(d_model, dim=-1)
        if mask is not None:
            mask = mask.expand(B, self.n_heads, T, T)
        outs, weights = [], []
        for i in range(self.n_heads):
            cols = slice(i * d_head, (i + 1) * d_head)
            scores = q[..., cols] @ k[..., cols].transpose(1, 2) / math.sqrt(d_head)
            if mask is not None:
                scores = scores.masked_fill(~mask[:, i], float("-inf"))
            w = torch.softmax(scores, dim=-1)
            outs.append(w @ v[..., cols])
            weights.append(w)
        out = self.out_proj(torch.cat(outs, dim=-1))
        return (out, torch.stack(weights, dim=1)) if return_weights else out
