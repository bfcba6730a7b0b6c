def split_heads(x, n_heads):
    """Deals the features out to the heads like cards: head i gets features i, i + h, i + 2h, ..."""
    *lead, T, d_model = x.shape
    if d_model % n_heads:
        raise ValueError("n_heads must divide d_model")
    x = x.reshape(*lead, T, d_model // n_heads, n_heads)  # (..., T, d_head, h)
    return x.movedim(-1, -3)  # (..., h, T, d_head)
