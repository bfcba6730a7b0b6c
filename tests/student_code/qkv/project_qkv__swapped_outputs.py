def project_qkv(x, W_q, W_k, W_v):
    """Project a sequence to queries, keys and values."""
    q = x @ W_q
    k = x @ W_k
    v = x @ W_v
    return k, q, v
