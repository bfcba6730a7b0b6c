import math

import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    """Accepts a mask but never uses it."""

    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=bias)
        self.W_k = nn.Linear(d_model, d_k, bias=bias)
        self.W_v = nn.Linear(d_model, d_v or d_k, bias=bias)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1]), dim=-1)
        return weights @ v
