def split_heads(x, n_heads):
    """view to (..., T, h, d_head) and move the heads axis in front of the tokens with movedim."""
    *lead, T, d_model = x.shape
    if d_model % n_heads:
        raise ValueError(f"{d_model} is not divisible by {n_heads}")
    return x.view(*lead, T, n_heads, d_model // n_heads).movedim(-2, -3)
