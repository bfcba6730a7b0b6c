import math

import torch


def rope(x, positions, base=10000.0):
    d = x.shape[-1]
    angles = positions.double()[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def rope_cached_attention(q, k, v, k_cache, v_cache, base=10000.0):
    T_past, T_new = k_cache.shape[-2], q.shape[-2]
    positions = torch.arange(T_past, T_past + T_new)
    k_all = torch.cat((k_cache, rope(k, positions, base)), dim=-2)
    v_all = torch.cat((v_cache, v), dim=-2)
    scores = rope(q, positions, base) @ k_all.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(T_new, T_past + T_new, dtype=torch.bool).tril(diagonal=T_past)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return weights @ v_all, k_all, v_all
