def attention_flops(T, d_k, d_v=None, batch=1, heads=1, causal=False):
    """Assumes values are as wide as keys."""
    pairs = T * (T + 1) // 2 if causal else T * T
    return 4 * batch * heads * pairs * d_k
