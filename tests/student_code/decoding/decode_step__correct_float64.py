def decode_step(q, k_new, v_new, past=None):
    # everything in float64 inside, the result back in the input's dtype
    if past is None:
        past = (k_new.new_zeros(*k_new.shape[:-2], 0, k_new.shape[-1]),
                v_new.new_zeros(*v_new.shape[:-2], 0, v_new.shape[-1]))
    k_all, v_all = torch.cat([past[0], k_new], -2), torch.cat([past[1], v_new], -2)
    offset = k_all.shape[-2] - q.shape[-2]
    s = torch.einsum("...id,...jd->...ij", q.double(), k_all.double()) / q.shape[-1] ** 0.5
    i = torch.arange(q.shape[-2])[:, None]
    j = torch.arange(k_all.shape[-2])[None, :]
    s = torch.where(j <= i + offset, s, torch.tensor(float("-inf"), dtype=s.dtype))
    p = torch.exp(s - s.amax(-1, keepdim=True))
    p = p / p.sum(-1, keepdim=True)
    return torch.einsum("...ij,...jd->...id", p, v_all.double()).to(q.dtype), (k_all, v_all)
