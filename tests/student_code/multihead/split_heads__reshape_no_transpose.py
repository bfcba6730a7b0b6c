def split_heads(x, n_heads):
    """Cuts the rows into heads but forgets to move the heads in front of the tokens: (..., T, h, d_head)."""
    *lead, T, d_model = x.shape
    if d_model % n_heads:
        raise ValueError("n_heads must divide d_model")
    return x.reshape(*lead, T, n_heads, d_model // n_heads)
