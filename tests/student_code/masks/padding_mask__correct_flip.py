import torch


def padding_mask(lengths, T, side="right"):
    """(B, T) bool, True at the real tokens: j < lengths[b] (right padding) or j >= T - lengths[b] (left)."""
    if side not in ("right", "left"):
        raise ValueError("side must be 'right' or 'left'")
    right = torch.arange(T)[None, :] < lengths[:, None]
    return right if side == "right" else right.flip(-1)  # left padding is right padding read backwards
