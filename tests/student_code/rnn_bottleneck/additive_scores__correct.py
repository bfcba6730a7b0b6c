import torch


def additive_scores(query, keys, W_q, W_k, v):
    """Bahdanau scores v . tanh(q W_q + k_t W_k) for every key, shape (B, T)."""
    q = query @ W_q          # (B, a)
    k = keys @ W_k           # (B, T, a)
    return torch.tanh(q[:, None, :] + k) @ v
