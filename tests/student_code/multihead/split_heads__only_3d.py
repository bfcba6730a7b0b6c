def split_heads(x, n_heads):
    """Correct for (B, T, d_model) only: unpacking three sizes fails on other numbers of leading dims."""
    B, T, d_model = x.shape
    if d_model % n_heads != 0:
        raise ValueError("n_heads must divide d_model")
    return x.view(B, T, n_heads, d_model // n_heads).transpose(1, 2)
