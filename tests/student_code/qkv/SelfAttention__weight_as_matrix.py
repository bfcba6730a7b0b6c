import math

import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    """Multiplies by the Linear layers' weight directly, forgetting that it is stored transposed."""

    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_k, bias=bias)
        self.W_k = nn.Linear(d_model, d_k, bias=bias)
        self.W_v = nn.Linear(d_model, d_v or d_k, bias=bias)

    def forward(self, x, mask=None):
        q, k, v = x @ self.W_q.weight, x @ self.W_k.weight, x @ self.W_v.weight
        scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v
