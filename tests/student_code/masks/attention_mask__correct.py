import torch


def attention_mask(lengths, T, causal=False):
    """(B, 1, T, T) bool: m[b, 0, i, j] = j < lengths[b] (and j <= i when causal)."""
    keys = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    mask = keys[:, None, None, :] & torch.ones(T, T, dtype=torch.bool)
    if causal:
        mask = mask & torch.ones(T, T, dtype=torch.bool).tril()
    return mask
