import torch


def attention_mask(lengths, T, causal=False):
    """(B, 1, T, T) bool: m[b, 0, i, j] = j < lengths[b] (and j <= i when causal)."""
    keys = torch.arange(T)[None, :] < lengths[:, None]
    return keys[:, None, None, :] & torch.ones(T, T, dtype=torch.bool)
