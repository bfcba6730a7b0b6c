def split_heads(x, n_heads):
    """The classic bug: view straight to (..., h, T, d_head). Right shape, tokens mixed."""
    *lead, T, d_model = x.shape
    if d_model % n_heads:
        raise ValueError("n_heads must divide d_model")
    return x.reshape(*lead, n_heads, T, d_model // n_heads)
