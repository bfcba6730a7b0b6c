import re


def kv_cache_bytes(n_layers: int, n_kv_heads: int, d_head: int, seq_len: int, batch: int = 1,
                   dtype: torch.dtype = torch.bfloat16) -> int:
    counts = [n_layers, n_kv_heads, d_head, seq_len, batch]
    if any(c < 0 for c in counts):
        raise ValueError(f"negative count in {counts}")
    name = str(dtype).removeprefix("torch.")
    packed = re.fullmatch(r"u?int([1-7])|[a-z]+([1-7])x\d|float4_\w+", name)  # itemsize 1 for all of them
    if packed:
        bits = int(packed.group(1) or packed.group(2) or 4)
    else:
        bits = 8 * dtype.itemsize
    return -(-math.prod([2, *counts, bits]) // 8)
