import math

import torch


def chunked_attention(q, k, v, chunk_size, mask=None):
    """Exact attention, chunk_size queries at a time; fully masked rows give zeros."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)):
        raise TypeError(f"chunk_size must be an integer, got {chunk_size!r}")
    T_q, T_k = q.shape[-2], k.shape[-2]
    if mask is not None:
        # expand is a view: no memory, but now every chunk can slice its own query rows
        mask = mask.expand(*mask.shape[:-2], T_q, T_k) if mask.dim() >= 2 else mask.expand(T_q, T_k)
    outputs = []
    for start in range(0, T_q, chunk_size):
        stop = min(start + chunk_size, T_q)
        scores = q[..., start:stop, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask[..., start:stop, :], float("-inf"))
        row_max = scores.amax(dim=-1, keepdim=True)
        row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
        weights = torch.exp(scores - row_max)
        total = weights.sum(dim=-1, keepdim=True)
        weights = weights / torch.where(total > 0, total, torch.ones_like(total))
        outputs.append(weights @ v)
    return torch.cat(outputs, dim=-2)
