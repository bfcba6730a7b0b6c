import torch


def attention_mask(lengths, T, causal=False):
    """(B, 1, T, T) bool: m[b, 0, i, j] = j < lengths[b] (and j <= i when causal)."""
    B = lengths.shape[0]
    keys = torch.arange(T)[None, :] < lengths[:, None]
    mask = keys[:, None, None, :].expand(B, 1, T, T).clone()
    if causal:
        i = torch.arange(T)[:, None]
        j = torch.arange(T)[None, :]
        mask &= j <= i
    return mask
