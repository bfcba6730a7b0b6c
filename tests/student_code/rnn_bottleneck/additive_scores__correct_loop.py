import torch


def additive_scores(query, keys, W_q, W_k, v):
    """One key position at a time, summing over the attention width by hand."""
    B, T, _ = keys.shape
    q = torch.matmul(query, W_q)
    columns = []
    for t in range(T):
        hidden = torch.tanh(q + torch.matmul(keys[:, t, :], W_k))  # (B, a)
        columns.append((hidden * v).sum(dim=-1))                    # (B,)
    return torch.stack(columns, dim=1)
