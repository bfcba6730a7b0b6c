import math

import torch


def rms_norm(x, weight, eps=1e-6):
    """Through torch.linalg.vector_norm: rms = ||x|| / sqrt(d), computed in float64 and rounded once."""
    x64 = x.to(torch.float64)
    d = x.shape[-1]
    rms2 = (torch.linalg.vector_norm(x64, dim=-1, keepdim=True) / math.sqrt(d)) ** 2
    return torch.where(rms2 + eps > 0, weight.double() * x64 / torch.sqrt(rms2 + eps), 0.0).to(x.dtype)
