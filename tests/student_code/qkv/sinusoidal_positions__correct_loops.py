import math

import torch


def sinusoidal_positions(T, d_model):
    """Sinusoidal positional encodings with explicit loops over positions and pairs."""
    if d_model % 2 or d_model < 1 or T < 0:
        raise ValueError("d_model must be even and positive, T >= 0")
    pe = torch.empty(T, d_model)
    for pos in range(T):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe
