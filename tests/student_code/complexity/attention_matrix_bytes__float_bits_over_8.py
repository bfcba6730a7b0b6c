import torch


def attention_matrix_bytes(T, batch=1, heads=1, dtype=torch.float32):
    """bits / 8 is a float (and finfo knows floating dtypes only)."""
    return batch * heads * T * T * torch.finfo(dtype).bits / 8
