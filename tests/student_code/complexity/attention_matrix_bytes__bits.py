import torch


def attention_matrix_bytes(T, batch=1, heads=1, dtype=torch.float32):
    """Multiplies by the number of bits, not bytes."""
    return batch * heads * T * T * torch.finfo(dtype).bits
