def kv_cache_bytes(n_layers: int, n_kv_heads: int, d_head: int, seq_len: int, batch: int = 1,
                   dtype: torch.dtype = torch.bfloat16) -> int:
    counts = [n_layers, n_kv_heads, d_head, seq_len, batch]
    if any(c < 0 for c in counts):
        raise ValueError(f"negative count in {counts}")
    return math.prod([2, *counts, dtype.itemsize])
