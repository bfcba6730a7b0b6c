def split_kv_attention(q, k, v, n_splits):
    """FlashDecoding on one device: partial attentions over key chunks, combined by their log-sum-exp."""
    if n_splits < 1:
        raise ValueError("n_splits must be >= 1")
    T_k = k.shape[-2]
    size = math.ceil(T_k / n_splits)
    outs, lses = [], []
    for start in range(0, T_k, size):
        s = q @ k[..., start:start + size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        m = s.amax(dim=-1, keepdim=True)
        e = torch.exp(s - m)
        total = e.sum(dim=-1, keepdim=True)
        outs.append((e / total) @ v[..., start:start + size, :])
        lses.append(m + torch.log(total))
    lse = torch.stack(lses)
    L = torch.logsumexp(lse, dim=0)
    return sum(torch.exp(l - L) * o for l, o in zip(lses, outs))
