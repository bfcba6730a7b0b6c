import torch


def apply_rope(x, positions, base=10000.0):
    """Interleaved RoPE: pair (x[2i], x[2i+1]) turned by positions * base^(-2i/d)."""
    d = x.shape[-1]
    if d % 2 or positions.dim() != 1 or positions.is_floating_point() or positions.shape[0] != x.shape[-2]:
        raise ValueError("need an even d and one integer position per row")
    work = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    i = torch.arange(d // 2, dtype=torch.float64)
    theta = base ** (-2 * i / d)
    angles = positions.double()[:, None] * theta[None, :]
    cos, sin = angles.cos().to(work), angles.sin().to(work)
    even, odd = x[..., 0::2].to(work), x[..., 1::2].to(work)
    out = torch.empty(x.shape, dtype=work)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out.to(x.dtype)
