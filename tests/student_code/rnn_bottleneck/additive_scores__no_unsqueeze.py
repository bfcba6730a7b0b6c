import torch


def additive_scores(query, keys, W_q, W_k, v):
    """Adds the (B, a) query projection to the (B, T, a) keys without a T axis: it broadcasts
    against the wrong axis (or fails) unless B == 1."""
    q = query @ W_q
    k = keys @ W_k
    return torch.tanh(q + k) @ v
