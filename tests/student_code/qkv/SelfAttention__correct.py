import math

import torch
import torch.nn as nn


class SelfAttention(nn.Module):
    """Single-head self-attention written out in full, independent of the other exercises."""

    def __init__(self, d_model, d_k, d_v=None, bias=False):
        super().__init__()
        if d_v is None:
            d_v = d_k
        self.W_q = nn.Linear(d_model, d_k, bias=bias)
        self.W_k = nn.Linear(d_model, d_k, bias=bias)
        self.W_v = nn.Linear(d_model, d_v, bias=bias)

    def forward(self, x, mask=None):
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        scores = torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return torch.einsum("...ij,...jd->...id", weights, v)
