import torch
import torch.nn.functional as F


def causal_attention(q, k, v):
    """Causal self-attention: position i attends to positions 0..i only. Returns (..., T, d_v)."""
    T = q.shape[-2]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~future)  # True = may attend
