import torch


def attention_matrix_bytes(T, batch=1, heads=1, dtype=torch.float32):
    """Right for floating dtypes; torch.finfo raises on int8 and bool."""
    return batch * heads * T * T * (torch.finfo(dtype).bits // 8)
