def attention_entropy(weights, mask=None):
    """Row by row with Python loops: the definition as written, no vectorisation."""
    if not torch.is_tensor(weights) or weights.ndim != 4 or weights.dtype not in (
            torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise ValueError("weights must be a floating (B, H, T_q, T_k) tensor")
    out_dtype = torch.float64 if weights.dtype == torch.float64 else torch.float32
    B, H, T_q, T_k = weights.shape
    if mask is None:
        mask = torch.ones(1, dtype=torch.bool)
    if not torch.is_tensor(mask) or mask.dtype != torch.bool:
        raise ValueError("mask must be bool")
    if mask.ndim > 4:
        raise ValueError("mask has too many dims")
    m4 = mask.reshape((1,) * (4 - mask.ndim) + tuple(mask.shape))
    for size, full in zip(m4.shape, weights.shape):
        if size not in (1, full):
            raise ValueError("mask does not broadcast")
    w = weights.double()
    totals, counts = [0.0] * H, [0] * H
    for b in range(B):
        for h in range(H):
            for i in range(T_q):
                row_mask = m4[min(b, m4.shape[0] - 1), min(h, m4.shape[1] - 1), min(i, m4.shape[2] - 1)]
                keys = [j for j in range(T_k) if bool(row_mask[min(j, m4.shape[3] - 1)])]
                if len(keys) < 2:
                    continue
                s = 0.0
                for j in keys:
                    pj = float(w[b, h, i, j])
                    if pj > 0:
                        s -= pj * math.log(pj)
                totals[h] += s / math.log(len(keys))
                counts[h] += 1
    if 0 in counts:
        raise ValueError("some head has no row with at least two allowed keys")
    return torch.tensor([t / c for t, c in zip(totals, counts)], dtype=out_dtype)
