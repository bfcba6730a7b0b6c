import torch


def merge_heads(x):
    """Concatenate the heads along the feature axis, exactly as Concat(head_1, ..., head_h) reads."""
    return torch.cat(x.unbind(dim=-3), dim=-1)
