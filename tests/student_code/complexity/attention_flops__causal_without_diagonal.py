def attention_flops(T, d_k, d_v=None, batch=1, heads=1, causal=False):
    """Counts the pairs j < i: a token would not attend to itself."""
    if d_v is None:
        d_v = d_k
    pairs = T * (T - 1) // 2 if causal else T * T
    return 2 * batch * heads * pairs * (d_k + d_v)
