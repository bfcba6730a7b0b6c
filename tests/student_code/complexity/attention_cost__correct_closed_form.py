def attention_cost(T, d, heads=1, batch=1, dtype=torch.bfloat16, kind="standard", block_q=128, block_k=128,
                   causal=False, backward=False):
    """One pass over the query blocks: block [a, b) meets the key blocks 0 .. (b - 1) // block_k."""
    sizes = {"T": T, "d": d, "heads": heads, "batch": batch, "block_q": block_q, "block_k": block_k}
    for name, value in sizes.items():
        if type(value) is bool or not (isinstance(value, int) or np.issubdtype(type(value), np.integer)):
            raise TypeError(f"{name}={value!r} is not an integer")
    sizes = {name: int(value) for name, value in sizes.items()}
    if sizes["T"] < 0 or min(v for n, v in sizes.items() if n != "T") < 1:
        raise ValueError(f"sizes out of range: {sizes}")
    if type(dtype) is not torch.dtype or type(causal) is not bool or type(backward) is not bool:
        raise TypeError("dtype must be a torch.dtype, causal and backward bools")
    if kind not in {"standard", "flash"}:
        raise ValueError("kind must be 'standard' or 'flash'")
    T, d, bq, bk = sizes["T"], sizes["d"], sizes["block_q"], sizes["block_k"]
    n, E = sizes["heads"] * sizes["batch"], torch.empty(0, dtype=dtype).element_size()
    if kind == "standard":
        flops = (8 if backward else 4) * T**2 * d
        elements = 8 * T * d + 7 * T**2 if backward else 4 * T * d + 4 * T**2
        return {"flops": n * flops, "hbm_bytes": n * elements * E}
    R = rows = cols = 0
    all_blocks = -(-T // bk)
    for a in range(0, T, bq):
        height = min(bq, T - a)
        met = (a + height - 1) // bk + 1 if causal else all_blocks
        keys = min(T, met * bk)
        R, rows, cols = R + height * keys, rows + height * met, cols + keys
    if backward:
        return {"flops": n * 10 * R * d, "hbm_bytes": n * ((6 * T * d + 4 * d * rows) * E + 4 * T + 8 * rows)}
    return {"flops": n * 4 * R * d, "hbm_bytes": n * ((2 * T * d + 2 * d * cols) * E + 4 * T)}
