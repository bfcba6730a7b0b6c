def bottom_right_causal_mask(T_q: int, T_k: int, device=None) -> torch.Tensor:
    """Causal mask of the T_q newest queries over T_k keys, aligned bottom-right."""
    if T_q < 0 or T_k < 0:
        raise ValueError("lengths must be >= 0")
    if T_q > T_k:
        raise ValueError("T_q must be <= T_k")
    return torch.ones(T_q, T_k, dtype=torch.bool, device=device).tril(diagonal=T_k - T_q)
