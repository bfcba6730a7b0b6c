import torch


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last dim of x, streamed in blocks of block_size entries."""
    n = x.shape[-1]
    l = x.new_zeros(x.shape[:-1])
    maxima = []
    for j in range(0, n, block_size):
        xb = x[..., j:j + block_size]
        mb = xb.amax(-1, keepdim=True).nan_to_num(neginf=0.0)  # each block uses its own max
        maxima.append(mb)
        l = l + (xb - mb).exp().sum(-1)
    pieces = []
    for i, j in enumerate(range(0, n, block_size)):
        pieces.append((x[..., j:j + block_size] - maxima[i]).exp() / l[..., None])
    return torch.cat(pieces, dim=-1)
