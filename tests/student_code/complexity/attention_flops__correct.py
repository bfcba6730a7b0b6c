def attention_flops(T, d_k, d_v=None, batch=1, heads=1, causal=False):
    """FLOPs of q k^T and weights @ v: 2 per multiply-add."""
    if d_v is None:
        d_v = d_k
    pairs = T * (T + 1) // 2 if causal else T * T
    return 2 * batch * heads * pairs * (d_k + d_v)
