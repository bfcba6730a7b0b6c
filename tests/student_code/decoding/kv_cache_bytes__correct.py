def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, dtype=torch.bfloat16):
    """2 (keys and values) x layers x kv heads x d_head x tokens x batch x bytes per element."""
    if min(n_layers, n_kv_heads, d_head, seq_len, batch) < 0:
        raise ValueError("counts must be >= 0")
    element = torch.empty(0, dtype=dtype).element_size()
    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * element
