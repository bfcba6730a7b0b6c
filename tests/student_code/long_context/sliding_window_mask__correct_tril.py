import torch


def sliding_window_mask(T_q, T_k, window):
    """Two bottom-right triangles: causal minus everything window or more steps back."""
    if window <= 0:
        raise ValueError("window must be positive")
    if T_q > T_k or T_q < 0:
        raise ValueError("T_q must lie in 0..T_k")
    ones = torch.ones(T_q, T_k, dtype=torch.bool)
    causal = ones.tril(diagonal=T_k - T_q)
    too_old = ones.tril(diagonal=T_k - T_q - window)
    return torch.where(too_old, torch.zeros_like(causal), causal)
