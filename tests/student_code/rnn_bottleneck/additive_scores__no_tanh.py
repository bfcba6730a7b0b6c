def additive_scores(query, keys, W_q, W_k, v):
    """Forgets the nonlinearity: v . (q W_q + k_t W_k), a linear score."""
    q = query @ W_q
    k = keys @ W_k
    return (q[:, None, :] + k) @ v
