import math

import torch


def chunked_attention(q, k, v, chunk_size, mask=None):
    """Loops over chunks, but only after building every score at once."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k): the whole matrix
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    outputs = [weights[..., i:i + chunk_size, :] @ v for i in range(0, q.shape[-2], chunk_size)]
    return torch.cat(outputs, dim=-2)
