import math

import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    """Correct maths, but the layers are called query/key/value instead of W_q/W_k/W_v."""

    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        self.query = nn.Linear(d_model, d_k, bias=bias)
        self.key = nn.Linear(d_model, d_k, bias=bias)
        self.value = nn.Linear(d_model, d_v or d_k, bias=bias)

    def forward(self, x, mask=None):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v
