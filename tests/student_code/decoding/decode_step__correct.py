def decode_step(q, k_new, v_new, past=None):
    """The new tokens attend to the cache and, causally, to each other."""
    if past is not None:
        k_all = torch.cat([past[0], k_new], dim=-2)
        v_all = torch.cat([past[1], v_new], dim=-2)
    else:
        k_all, v_all = k_new.clone(), v_new.clone()
    T_new, T_all = q.shape[-2], k_all.shape[-2]
    scores = q @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.arange(T_all)[None, :] <= torch.arange(T_all - T_new, T_all)[:, None]
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return weights @ v_all, (k_all, v_all)
