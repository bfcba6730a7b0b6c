import torch


def attention_mask(lengths, T, causal=False):
    """(B, 1, T, T) bool: m[b, 0, i, j] = j < lengths[b] (and j <= i when causal)."""
    mask = (torch.arange(T)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, T)
    if causal:
        mask = mask & torch.ones(T, T, dtype=torch.bool).tril()
    return mask
