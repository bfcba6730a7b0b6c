def causal_gqa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal grouped-query attention: q (B, H, T, d), k and v (B, H_kv, T, d), head h reads kv head h // (H / H_kv)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or k.shape != v.shape:
        raise ValueError("need q (B, H, T, d) and k, v (B, H_kv, T, d) of one shape")
    B, H, T, d = q.shape
    if k.shape[0] != B or k.shape[2] != T or k.shape[3] != d or H % k.shape[1] != 0:
        raise ValueError("k and v must share q's batch, length and width, with H_kv dividing H")
    group = H // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return weights @ v
