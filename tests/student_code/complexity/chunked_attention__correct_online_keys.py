import math

import torch


def chunked_attention(q, k, v, chunk_size, mask=None):
    """Blocks of keys with an online softmax (FlashAttention's trick): also chunk_size x T scores."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)):
        raise TypeError(f"chunk_size must be an integer, got {chunk_size!r}")
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    if mask is not None:  # a view with T_k columns, so that every key block can slice its own
        mask = mask.expand(*mask.shape[:-2], mask.shape[-2], T_k) if mask.dim() >= 2 else mask.expand(T_q, T_k)
    m = None
    for start in range(0, T_k, chunk_size):
        stop = min(start + chunk_size, T_k)
        s = (q @ k[..., start:stop, :].transpose(-2, -1)) * scale  # (..., T_q, block)
        if mask is not None:
            s = s.masked_fill(~mask[..., start:stop], float("-inf"))
        block_max = s.amax(dim=-1, keepdim=True)
        if m is None:
            m_new = block_max
        else:
            m_new = torch.maximum(m, block_max)
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(s - safe)
        pv = p @ v[..., start:stop, :]
        if m is None:
            acc, l_sum = pv, p.sum(dim=-1, keepdim=True)
        else:
            alpha = torch.exp(torch.where(torch.isinf(m), m, m - safe))  # exp(-inf) = 0 before any key
            acc = acc * alpha + pv
            l_sum = l_sum * alpha + p.sum(dim=-1, keepdim=True)
        m = m_new
    return acc / torch.where(l_sum > 0, l_sum, torch.ones_like(l_sum))
