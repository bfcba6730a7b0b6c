import torch


def causal_mask(T, device=None):
    """(T, T) bool, True where query i may attend to key j, i.e. j <= i."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()
