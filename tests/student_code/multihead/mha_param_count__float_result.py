def mha_param_count(d_model, n_heads, bias=True):
    """Right number, wrong type: d_head = d_model / n_heads is a float, so the count is one too."""
    if d_model % n_heads != 0:
        raise ValueError("n_heads must divide d_model")
    d_head = d_model / n_heads
    count = 4 * n_heads * d_head * d_model
    if bias:
        count += 4 * d_model
    return count
