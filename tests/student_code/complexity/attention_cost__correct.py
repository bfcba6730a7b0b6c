def attention_cost(T, d, heads=1, batch=1, dtype=torch.bfloat16, kind="standard", block_q=128, block_k=128,
                   causal=False, backward=False):
    """FLOPs and HBM bytes of attention, tile by tile for the tiled kernel."""
    for name, value in (("T", T), ("d", d), ("heads", heads), ("batch", batch), ("block_q", block_q),
                        ("block_k", block_k)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int")
        if value < (0 if name == "T" else 1):
            raise ValueError(f"{name} is too small: {value}")
    if not isinstance(dtype, torch.dtype):
        raise TypeError("dtype must be a torch.dtype")
    if not isinstance(causal, bool) or not isinstance(backward, bool):
        raise TypeError("causal and backward must be bools")
    if kind not in ("standard", "flash"):
        raise ValueError(f"unknown kind {kind!r}")
    T, d, heads, batch, block_q, block_k = (int(x) for x in (T, d, heads, batch, block_q, block_k))
    E = dtype.itemsize
    if kind == "standard":
        if backward:
            flops, nbytes = 8 * T * T * d, (8 * T * d + 7 * T * T) * E
        else:
            flops, nbytes = 4 * T * T * d, (4 * T * d + 4 * T * T) * E
    else:
        pairs = rows = cols = 0
        for a in range(0, T, block_q):
            b = min(a + block_q, T)
            for c in range(0, T, block_k):
                e = min(c + block_k, T)
                if causal and c > b - 1:  # every key of this tile lies after every query of the block
                    continue
                pairs += (b - a) * (e - c)
                rows += b - a
                cols += e - c
        if backward:
            flops = 10 * pairs * d
            nbytes = (6 * T * d + 4 * d * rows) * E + 4 * T + 8 * rows
        else:
            flops = 4 * pairs * d
            nbytes = (2 * T * d + 2 * d * cols) * E + 4 * T
    return {"flops": batch * heads * flops, "hbm_bytes": batch * heads * nbytes}
