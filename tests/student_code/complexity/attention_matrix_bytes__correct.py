import torch


def attention_matrix_bytes(T, batch=1, heads=1, dtype=torch.float32):
    """One (batch, heads, T, T) matrix of dtype, in bytes."""
    bytes_per_element = torch.empty(0, dtype=dtype).element_size()
    return batch * heads * T * T * bytes_per_element
