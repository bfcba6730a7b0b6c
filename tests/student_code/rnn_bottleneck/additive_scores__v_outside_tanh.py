import torch


def additive_scores(query, keys, W_q, W_k, v):
    """Applies v before the nonlinearity: tanh(v . (q W_q + k_t W_k))."""
    q = query @ W_q
    k = keys @ W_k
    return torch.tanh((q.unsqueeze(1) + k) @ v)
