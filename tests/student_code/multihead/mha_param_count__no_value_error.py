def mha_param_count(d_model, n_heads, bias=True):
    """Right count, but accepts a number of heads that does not divide d_model."""
    return 4 * d_model * d_model + (4 * d_model if bias else 0)
