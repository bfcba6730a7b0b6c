import torch


def additive_scores(query, keys, W_q, W_k, v):
    """Column-vector habit: W_q^T q written as query @ W_q.T."""
    q = query @ W_q.T
    k = keys @ W_k.T
    return torch.tanh(q.unsqueeze(1) + k) @ v
