import torch


def padding_mask(lengths, T):
    """(B, T) bool, True at the real tokens: m[b, j] = j < lengths[b]."""
    return torch.arange(T)[None, :] >= lengths[:, None]
