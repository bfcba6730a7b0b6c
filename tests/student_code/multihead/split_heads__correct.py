def split_heads(x, n_heads):
    """Reshape (..., T, d_model) to (..., T, h, d_head), then swap tokens and heads."""
    d_model = x.shape[-1]
    if d_model % n_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    d_head = d_model // n_heads
    x = x.reshape(*x.shape[:-1], n_heads, d_head)
    return x.transpose(-3, -2)
