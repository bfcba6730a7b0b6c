def mha_param_count(d_model, n_heads, bias=True):
    """Counts W_Q, W_K, W_V and their biases, and forgets the output projection W_O."""
    if d_model % n_heads != 0:
        raise ValueError("n_heads must divide d_model")
    return 3 * d_model * d_model + (3 * d_model if bias else 0)
