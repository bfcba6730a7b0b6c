import torch
import torch.nn.functional as F


def chunked_attention(q, k, v, chunk_size, mask=None):
    """Chunks the queries but lets PyTorch's built-in attention do each chunk."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = mask.expand(*mask.shape[:-2], T_q, T_k) if mask.dim() >= 2 else mask.expand(T_q, T_k)
    outputs = []
    for start in range(0, T_q, chunk_size):
        m = None if mask is None else mask[..., start:start + chunk_size, :]
        outputs.append(F.scaled_dot_product_attention(q[..., start:start + chunk_size, :], k, v, attn_mask=m))
    return torch.cat(outputs, dim=-2)
