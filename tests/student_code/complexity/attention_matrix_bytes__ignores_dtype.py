import torch


def attention_matrix_bytes(T, batch=1, heads=1, dtype=torch.float32):
    """Four bytes per score, whatever the dtype."""
    return 4 * batch * heads * T * T
