import torch


def padding_mask(lengths, T, side="right"):
    """(B, T) bool, True at the real tokens: j < lengths[b] (right padding) or j >= T - lengths[b] (left)."""
    lengths = lengths.long()  # T - lengths in uint8 or int8 would wrap around for a T past their range
    positions = torch.arange(T, device=lengths.device)[None, :]
    if side == "right":
        return positions < lengths[:, None]
    if side == "left":
        return positions >= T - lengths[:, None]
    raise ValueError(f"side must be 'right' or 'left', got {side!r}")
