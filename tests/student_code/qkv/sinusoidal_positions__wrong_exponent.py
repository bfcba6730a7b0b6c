import torch


def sinusoidal_positions(T, d_model):
    """Uses 10000^(i / d_model) with the pair index i, instead of 10000^(2i / d_model)."""
    if d_model % 2:
        raise ValueError("d_model must be even")
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    i = torch.arange(d_model // 2, dtype=torch.float32)
    angles = pos / 10000 ** (i / d_model)
    pe = torch.zeros(T, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe
