def split_kv_attention(q, k, v, n_splits):
    if n_splits < 1:
        raise ValueError("need at least one split")
    T_k = k.shape[-2]
    c = (T_k + n_splits - 1) // n_splits
    qd = q.double() / math.sqrt(q.shape[-1])
    partial_out, partial_lse = [], []
    for s in range(n_splits):
        lo, hi = s * c, min((s + 1) * c, T_k)
        if lo >= hi:
            continue  # more splits than keys: an empty chunk
        scores = torch.einsum("...qd,...kd->...qk", qd, k[..., lo:hi, :].double())
        lse = torch.logsumexp(scores, dim=-1)
        weights = torch.exp(scores - lse[..., None])
        partial_out.append(torch.einsum("...qk,...kd->...qd", weights, v[..., lo:hi, :].double()))
        partial_lse.append(lse)
    lses = torch.stack(partial_lse)
    w = torch.softmax(lses, dim=0)  # e^(l_s - L)
    return (w[..., None] * torch.stack(partial_out)).sum(0).to(q.dtype)
