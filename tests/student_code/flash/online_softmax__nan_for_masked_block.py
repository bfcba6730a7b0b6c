import math

import torch


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last dim of x, streamed in blocks of block_size entries."""
    n = x.shape[-1]
    m = x.new_full(x.shape[:-1], -math.inf)
    l = x.new_zeros(x.shape[:-1])
    for j in range(0, n, block_size):
        xb = x[..., j:j + block_size]
        m_new = torch.maximum(m, xb.amax(-1))
        l = l * (m - m_new).exp() + (xb - m_new[..., None]).exp().sum(-1)  # -inf - (-inf) = nan
        m = m_new
    out = torch.empty_like(x)
    for j in range(0, n, block_size):
        out[..., j:j + block_size] = (x[..., j:j + block_size] - m[..., None]).exp() / l[..., None]
    return out
