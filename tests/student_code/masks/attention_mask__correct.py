import torch


def attention_mask(lengths, T, causal=False, side="right"):
    """(B, 1, T, T) bool: keys are masked, queries are not; a row left without any key attends to itself."""
    lengths = lengths.long()  # T - lengths in uint8 or int8 would wrap around for a T past their range
    if side == "right":
        keys = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    elif side == "left":
        keys = torch.arange(T)[None, :] >= T - lengths[:, None]  # (B, T)
    else:
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    mask = keys[:, None, None, :] & torch.ones(T, T, dtype=torch.bool)
    if causal:
        mask = mask & torch.ones(T, T, dtype=torch.bool).tril()
    empty = ~mask.any(dim=-1, keepdim=True)  # (B, 1, T, 1)
    return mask | (empty & torch.eye(T, dtype=torch.bool))
