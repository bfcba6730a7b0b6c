import torch


def attention_matrix_bytes(T, batch=1, heads=1, dtype=torch.float32):
    return batch * heads * T**2 * dtype.itemsize
