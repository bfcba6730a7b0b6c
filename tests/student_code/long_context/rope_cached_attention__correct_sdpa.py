import torch
import torch.nn.functional as F


def rotate(x, positions, base):
    """Interleaved RoPE through complex numbers."""
    d = x.shape[-1]
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turn = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64), positions.double()[:, None] * freqs)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * turn).reshape(x.shape).to(x.dtype)


def rope_cached_attention(q, k, v, k_cache, v_cache, base=10000.0):
    past = k_cache.shape[-2]
    pos = past + torch.arange(q.shape[-2])
    keys = torch.cat([k_cache, rotate(k, pos, base)], dim=-2)
    values = torch.cat([v_cache, v], dim=-2)
    # bottom-right causal: new token t sees every cached key and the new keys 0..t
    mask = torch.arange(keys.shape[-2])[None, :] <= pos[:, None]
    out = F.scaled_dot_product_attention(rotate(q, pos, base), keys, values, attn_mask=mask)
    return out, keys, values
