def attention_flops(T, d_k, d_v=None, batch=1, heads=1, causal=False):
    """Counts the two matrix products separately, pair by pair for the causal case."""
    d_v = d_k if d_v is None else d_v
    if causal:
        pairs = sum(i + 1 for i in range(T))  # query i sees keys 0..i
    else:
        pairs = T * T
    scores = 2 * pairs * d_k  # q k^T: one d_k-long dot product per pair
    mixing = 2 * pairs * d_v  # weights @ v: one multiply-add per pair and value column
    return batch * heads * (scores + mixing)
