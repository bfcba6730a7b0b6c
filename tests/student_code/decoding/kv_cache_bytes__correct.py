def kv_cache_bytes(n_layers, n_kv_heads, d_head, seq_len, batch=1, dtype=torch.bfloat16):
    """2 (keys and values) x layers x kv heads x d_head x tokens x batch x bits per value, in whole bytes."""
    if min(n_layers, n_kv_heads, d_head, seq_len, batch) < 0:
        raise ValueError("counts must be >= 0")
    packed = {torch.uint1: 1, torch.uint2: 2, torch.uint3: 3, torch.uint4: 4, torch.uint5: 5, torch.uint6: 6,
              torch.uint7: 7, torch.int1: 1, torch.int2: 2, torch.int3: 3, torch.int4: 4, torch.int5: 5,
              torch.int6: 6, torch.int7: 7, torch.float4_e2m1fn_x2: 4, torch.quint4x2: 4, torch.quint2x4: 2}
    element_bits = packed.get(dtype, torch.empty(0, dtype=dtype).element_size() * 8)
    return (2 * n_layers * n_kv_heads * d_head * seq_len * batch * element_bits + 7) // 8
