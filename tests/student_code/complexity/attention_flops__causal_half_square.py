def attention_flops(T, d_k, d_v=None, batch=1, heads=1, causal=False):
    """A causal mask "halves the matrix": T^2 / 2 pairs, forgetting half of the diagonal."""
    if d_v is None:
        d_v = d_k
    pairs = T * T // 2 if causal else T * T
    return 2 * batch * heads * pairs * (d_k + d_v)
