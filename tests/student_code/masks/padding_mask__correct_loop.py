import torch


def padding_mask(lengths, T):
    """(B, T) bool, True at the real tokens: m[b, j] = j < lengths[b]."""
    mask = torch.zeros(len(lengths), T, dtype=torch.bool)
    for b, length in enumerate(lengths.tolist()):
        mask[b, :length] = True
    return mask
