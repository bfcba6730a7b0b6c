def attention_param_count(d_model, n_heads, n_kv_heads=None, d_head=None, bias=True):
    """Counts each projection's weight and bias: W_Q and W_O have n_heads heads, W_K and W_V n_kv_heads."""
    if d_model < 1 or n_heads < 1:
        raise ValueError("d_model and n_heads must be positive")
    if n_kv_heads is None:
        n_kv_heads = n_heads
    if n_kv_heads < 1 or n_heads % n_kv_heads != 0:
        raise ValueError("n_kv_heads must divide n_heads")
    if d_head is None:
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        d_head = d_model // n_heads
    if d_head < 1:
        raise ValueError("d_head must be positive")
    q_out = n_heads * d_head
    kv_out = n_kv_heads * d_head
    count = d_model * q_out + 2 * d_model * kv_out + q_out * d_model
    if bias:
        count += q_out + 2 * kv_out + d_model
    return count
