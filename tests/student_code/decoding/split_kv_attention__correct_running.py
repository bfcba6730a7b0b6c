def split_kv_attention(q, k, v, n_splits):
    # combine the partials as they arrive: a running log-sum-exp and a running weighted output
    if n_splits < 1:
        raise ValueError(f"n_splits={n_splits}")
    chunk = -(-k.shape[-2] // n_splits)
    scale = q.shape[-1] ** -0.5
    out, lse = None, None
    for k_c, v_c in zip(k.split(chunk, dim=-2), v.split(chunk, dim=-2)):
        s = (q @ k_c.transpose(-2, -1)) * scale
        lse_c = torch.logsumexp(s, dim=-1, keepdim=True)
        out_c = torch.exp(s - lse_c) @ v_c
        if out is None:
            out, lse = out_c, lse_c
        else:
            new = torch.logaddexp(lse, lse_c)
            out = torch.exp(lse - new) * out + torch.exp(lse_c - new) * out_c
            lse = new
    return out
