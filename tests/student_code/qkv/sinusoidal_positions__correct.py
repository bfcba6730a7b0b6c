import math

import torch


def sinusoidal_positions(T, d_model):
    """Sinusoidal positional encodings, the way many PyTorch tutorials write them (float32, exp-log)."""
    if d_model <= 0 or d_model % 2 != 0:
        raise ValueError(f"d_model must be a positive even number, got {d_model}")
    if T < 0:
        raise ValueError(f"T must be >= 0, got {T}")
    position = torch.arange(T, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(T, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
