import torch


def attention_mask(lengths, T, causal=False, side="right"):
    """(B, 1, T, T) bool: keys are masked, queries are not; a row left without any key attends to itself."""
    if side not in ("right", "left"):
        raise ValueError("side must be 'right' or 'left'")
    B, lengths = lengths.shape[0], lengths.to(torch.int64)
    j = torch.arange(T)
    start = T - lengths if side == "left" else torch.zeros_like(lengths)
    keys = (j[None, :] >= start[:, None]) & (j[None, :] < (start + lengths)[:, None])
    mask = keys[:, None, None, :].expand(B, 1, T, T).clone()
    if causal:
        mask &= j[None, :] <= j[:, None]
    for b in range(B):
        for i in range(T):
            if not mask[b, 0, i].any():
                mask[b, 0, i, i] = True
    return mask
