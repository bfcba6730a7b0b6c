def attention_param_count(d_model, n_heads, n_kv_heads=None, d_head=None, bias=True):
    """Adds up the layer head by head: each query head has W_Q^i and its rows of W_O, each kv head W_K^j, W_V^j."""
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    if min(d_model, n_heads, n_kv_heads) < 1 or n_heads % n_kv_heads:
        raise ValueError(f"bad sizes: d_model={d_model}, n_heads={n_heads}, n_kv_heads={n_kv_heads}")
    if d_head is None:
        d_head, rest = divmod(d_model, n_heads)
        if rest:
            raise ValueError(f"{n_heads} heads do not divide d_model={d_model}")
    elif d_head < 1:
        raise ValueError(f"d_head={d_head}")
    b = 1 if bias else 0
    per_query_head = (d_model + b) * d_head + d_head * d_model  # W_Q^i with its bias, and its d_head rows of W_O
    per_kv_head = 2 * (d_model + b) * d_head                    # W_K^j and W_V^j with their biases
    return n_heads * per_query_head + n_kv_heads * per_kv_head + b * d_model  # + the bias of W_O
