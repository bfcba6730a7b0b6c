import torch


def padding_mask(lengths, T, side="right"):
    """(B, T) bool, True at the real tokens: j < lengths[b] (right padding) or j >= T - lengths[b] (left)."""
    if side not in ("right", "left"):
        raise ValueError("side must be 'right' or 'left'")
    mask = torch.zeros(len(lengths), T, dtype=torch.bool)
    for b, length in enumerate(lengths.tolist()):
        if side == "right":
            mask[b, :length] = True
        else:
            mask[b, T - length:] = True
    return mask
