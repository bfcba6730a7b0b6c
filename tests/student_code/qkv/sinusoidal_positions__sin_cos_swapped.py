import torch


def sinusoidal_positions(T, d_model):
    """Cosines in the even columns and sines in the odd ones."""
    if d_model % 2:
        raise ValueError("d_model must be even")
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    angles = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe = torch.zeros(T, d_model)
    pe[:, 0::2] = torch.cos(angles)
    pe[:, 1::2] = torch.sin(angles)
    return pe
