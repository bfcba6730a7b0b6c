def causal_gqa_attention(q, k, v):
    """No copy of the kv heads: the query heads viewed as (H_kv, group) and einsum over the group dim, the
    softmax in float32 for every input dtype."""
    if q.ndim != 4 or k.shape != v.shape or k.ndim != 4:
        raise ValueError("bad ranks")
    B, H, T, d = q.shape
    B_k, H_kv, T_k, d_k = k.shape
    if (B_k, T_k, d_k) != (B, T, d) or H_kv == 0 or H % H_kv:
        raise ValueError("k, v do not fit q")
    g = H // H_kv
    qg = q.float().reshape(B, H_kv, g, T, d)                   # query head h = kv * g + i
    s = torch.einsum("bkgid,bkjd->bkgij", qg, k.float()) * d ** -0.5
    future = torch.arange(T)[None, :] > torch.arange(T)[:, None]
    s = s.masked_fill(future, -torch.inf)
    p = (s - s.amax(-1, keepdim=True)).exp()
    p = p / p.sum(-1, keepdim=True)
    out = torch.einsum("bkgij,bkjd->bkgid", p, v.float())
    return out.reshape(B, H, T, d).to(q.dtype)
