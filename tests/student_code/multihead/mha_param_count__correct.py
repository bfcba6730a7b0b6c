def mha_param_count(d_model, n_heads, bias=True):
    """W_Q, W_K, W_V, W_O are d_model x d_model each; four bias vectors of d_model with bias."""
    if d_model % n_heads != 0:
        raise ValueError("n_heads must divide d_model")
    count = 4 * d_model * d_model
    if bias:
        count += 4 * d_model
    return count
