import math

import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    """Defaults d_v to d_model instead of d_k."""

    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=bias)
        self.W_k = nn.Linear(d_model, d_k, bias=bias)
        self.W_v = nn.Linear(d_model, d_v or d_model, bias=bias)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v
