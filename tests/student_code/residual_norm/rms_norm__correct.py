import torch


def rms_norm(x, weight, eps=1e-6):
    """weight * x / sqrt(mean(x^2) + eps), half precision squared in float32."""
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    ms = xf.pow(2).mean(dim=-1, keepdim=True)
    return (weight.to(xf.dtype) * (xf * torch.rsqrt(ms + eps))).to(x.dtype)
