import torch


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last dim of x, streamed in blocks of block_size entries."""
    n = x.shape[-1]
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)  # running max
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)  # running sum of exp(x - m)
    for start in range(0, n, block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.max(dim=-1).values)
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # rows with only -inf so far
        l = l * torch.exp(m - safe) + torch.exp(block - safe.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    safe = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    pieces = []
    for start in range(0, n, block_size):
        block = x[..., start:start + block_size]
        pieces.append(torch.exp(block - safe.unsqueeze(-1)) / l.unsqueeze(-1))
    return torch.cat(pieces, dim=-1)
