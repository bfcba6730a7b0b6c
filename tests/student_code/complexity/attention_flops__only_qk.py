def attention_flops(T, d_k, d_v=None, batch=1, heads=1, causal=False):
    """Counts only the scores q k^T and forgets weights @ v."""
    pairs = T * (T + 1) // 2 if causal else T * T
    return 2 * batch * heads * pairs * d_k
