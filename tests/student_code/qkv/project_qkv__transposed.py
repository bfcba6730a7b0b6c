def project_qkv(x, W_q, W_k, W_v):
    """Project a sequence to queries, keys and values."""
    # thinks of W like nn.Linear's weight, (out, in)
    return x @ W_q.T, x @ W_k.T, x @ W_v.T
