import torch


def additive_scores(query, keys, W_q, W_k, v):
    """Projects the query with W_k and the keys with W_q."""
    q = query @ W_k
    k = keys @ W_q
    return torch.tanh(q[:, None, :] + k) @ v
