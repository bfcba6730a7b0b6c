def mha_param_count(d_model, n_heads, bias=True):
    """Believes that every head has its own full-width W_Q, W_K and W_V, so more heads cost more."""
    if d_model % n_heads != 0:
        raise ValueError("n_heads must divide d_model")
    per_head = 3 * d_model * d_model + (3 * d_model if bias else 0)
    return n_heads * per_head + d_model * d_model + (d_model if bias else 0)
