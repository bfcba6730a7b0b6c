import math

import torch


def attention_backward_from_lse(grad_out, q, k, v, out, lse, causal=False):
    """Named axes (i = query, j = key, c = feature, m = value feature), the mask from index comparisons,
    masked weights zeroed after the exponential, and D taken as rowsum(dP * P), which equals rowsum(dO * O)."""
    dt = q.dtype
    f = (lambda t: t.float()) if dt in (torch.float16, torch.bfloat16) else (lambda t: t)
    g, q, k, v, lse = f(grad_out), f(q), f(k), f(v), f(lse)
    s = torch.einsum("...ic,...jc->...ij", q, k) / math.sqrt(q.shape[-1])
    p = torch.exp(s - lse[..., :, None])
    if causal:
        i = torch.arange(s.shape[-2])[:, None]
        j = torch.arange(s.shape[-1])[None, :]
        p = torch.where(j <= i, p, torch.zeros_like(p))
    dv = torch.einsum("...ij,...im->...jm", p, g)
    dp = torch.einsum("...im,...jm->...ij", g, v)
    d = torch.einsum("...ij,...ij->...i", dp, p)[..., None]
    ds = p * (dp - d)
    dq = torch.einsum("...ij,...jc->...ic", ds, k) / math.sqrt(q.shape[-1])
    dk = torch.einsum("...ij,...ic->...jc", ds, q) / math.sqrt(q.shape[-1])
    return dq.to(dt), dk.to(dt), dv.to(dt)
