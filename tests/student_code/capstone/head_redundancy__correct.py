def head_redundancy(weights: torch.Tensor) -> torch.Tensor:
    """(H, H): cosine similarity of every two heads' attention patterns, flattened over (B, T_q, T_k)."""
    if not isinstance(weights, torch.Tensor) or weights.dim() != 4 or not weights.is_floating_point():
        raise ValueError("weights must be a 4-D floating tensor (B, H, T_q, T_k)")
    dtype = torch.float64 if weights.dtype == torch.float64 else torch.float32
    H = weights.shape[1]
    flat = weights.to(dtype).transpose(0, 1).reshape(H, -1)   # one row per head
    norms = flat.norm(dim=1, keepdim=True)
    if (norms == 0).any():
        raise ValueError("a head's weights are all zero")
    unit = flat / norms
    return unit @ unit.T
