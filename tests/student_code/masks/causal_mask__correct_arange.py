import torch


def causal_mask(T, device=None):
    """(T, T) bool, True where query i may attend to key j, i.e. j <= i."""
    positions = torch.arange(T, device=device)
    return positions[:, None] >= positions[None, :]
