def split_kv_attention(q, k, v, n_splits):
    """Every chunk's partial result kept in a Python list, as a dict, and combined at the end in a Python loop."""
    if n_splits < 1:
        raise ValueError(f"n_splits must be at least 1, got {n_splits}")
    T_k = k.shape[-2]
    chunk = math.ceil(T_k / n_splits)
    scale = 1.0 / math.sqrt(q.shape[-1])
    partials = []
    for start in range(0, T_k, chunk):
        k_c = k[..., start:start + chunk, :].float()
        v_c = v[..., start:start + chunk, :].float()
        s = (q.float() @ k_c.transpose(-2, -1)) * scale
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        partials.append({"start": start, "keys": k_c.shape[-2], "out": torch.exp(s - lse) @ v_c, "lse": lse})
    m = partials[0]["lse"]
    for p in partials[1:]:
        m = torch.maximum(m, p["lse"])
    total = torch.zeros_like(m)
    out = torch.zeros_like(partials[0]["out"])
    for p in partials:
        w = torch.exp(p["lse"] - m)
        total = total + w
        out = out + w * p["out"]
    return (out / total).to(q.dtype)
