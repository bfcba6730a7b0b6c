import torch


def apply_rope(x, positions, base=10000.0):
    """Meta's Llama style: each pair is one complex number, multiplied by exp(i * position * theta)."""
    d = x.shape[-1]
    if d % 2:
        raise ValueError("d must be even")
    if not isinstance(positions, torch.Tensor) or positions.dim() != 1 or positions.is_floating_point():
        raise ValueError("positions must be a 1-D integer tensor")
    if len(positions) != x.shape[-2]:
        raise ValueError("one position per row")
    freqs = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.outer(positions.to(torch.float64), freqs)
    rot = torch.polar(torch.ones_like(angles), angles)  # complex128 (T, d/2)
    real = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    z = torch.view_as_complex(x.to(real).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    rot = rot.to(z.dtype)
    return torch.view_as_real(z * rot).reshape(x.shape).to(x.dtype)
