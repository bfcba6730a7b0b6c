import torch


def causal_mask(T, device=None):
    """(T, T) bool, True where query i may attend to key j, i.e. j <= i."""
    return torch.tril(torch.ones(T, T, device=device))
