import torch.nn as nn


def mha_param_count(d_model, n_heads, bias=True):
    """Counts the parameters of PyTorch's own module (after checking the width splits evenly)."""
    if d_model % n_heads:
        raise ValueError("n_heads must divide d_model")
    return sum(p.numel() for p in nn.MultiheadAttention(d_model, n_heads, bias=bias).parameters())
