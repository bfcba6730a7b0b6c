import torch.nn.functional as F


def causal_attention(q, k, v):
    """Causal self-attention: position i attends to positions 0..i only. Returns (..., T, d_v)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
