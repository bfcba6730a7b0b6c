import torch


def sinusoidal_positions(T, d_model):
    """Right values, but returned in float64 (torch.arange of Python floats, no cast back)."""
    if d_model % 2:
        raise ValueError("d_model must be even")
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    angles = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(T, d_model)
