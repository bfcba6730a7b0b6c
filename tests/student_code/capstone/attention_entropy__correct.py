def attention_entropy(weights: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """(H,): each head's mean entropy over its rows with >= 2 allowed keys, normalised by log(allowed keys)."""
    if not isinstance(weights, torch.Tensor) or weights.dim() != 4 or not weights.is_floating_point():
        raise ValueError("weights must be a 4-D floating tensor (B, H, T_q, T_k)")
    dtype = torch.float64 if weights.dtype == torch.float64 else torch.float32
    w = weights.to(dtype)
    if mask is None:
        allowed = torch.ones(w.shape, dtype=torch.bool)
    else:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise ValueError("the mask must be a bool tensor")
        try:
            if torch.broadcast_shapes(mask.shape, w.shape) != w.shape:
                raise ValueError("the mask does not broadcast to the weights")
        except RuntimeError:
            raise ValueError("the mask does not broadcast to the weights") from None
        allowed = mask.expand(w.shape)
    p = torch.where(allowed, w, torch.zeros_like(w))
    safe = torch.where(p > 0, p, torch.ones_like(p))
    entropy = -(p * torch.log(safe)).sum(dim=-1)           # (B, H, T_q); 0 log 0 = 0
    n = allowed.sum(dim=-1)                                 # allowed keys per row
    rows = n >= 2
    normalised = entropy / torch.log(torch.clamp(n, min=2).to(dtype))
    per_head_rows = rows.sum(dim=(0, 2))
    if (per_head_rows == 0).any():
        raise ValueError("a head has no row with two or more allowed keys")
    return torch.where(rows, normalised, torch.zeros_like(normalised)).sum(dim=(0, 2)) / per_head_rows
