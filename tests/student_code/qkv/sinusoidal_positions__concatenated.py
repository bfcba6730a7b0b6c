import torch


def sinusoidal_positions(T, d_model):
    """All the sines, then all the cosines (the tensor2tensor layout), not interleaved."""
    if d_model % 2:
        raise ValueError("d_model must be even")
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    angles = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
