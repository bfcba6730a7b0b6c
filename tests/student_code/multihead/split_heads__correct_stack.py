import torch


def split_heads(x, n_heads):
    """Slice the column block of every head and stack the heads in front of the tokens."""
    d_model = x.shape[-1]
    if d_model % n_heads:
        raise ValueError("n_heads must divide d_model")
    d_head = d_model // n_heads
    return torch.stack([x[..., i * d_head:(i + 1) * d_head] for i in range(n_heads)], dim=-3)
