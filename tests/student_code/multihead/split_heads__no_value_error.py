def split_heads(x, n_heads):
    """Right whenever the width divides, but never raises ValueError (view raises RuntimeError instead)."""
    d_head = x.shape[-1] // n_heads
    return x.view(*x.shape[:-1], n_heads, d_head).transpose(-3, -2)
