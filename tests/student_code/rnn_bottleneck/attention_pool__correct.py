import torch


def attention_pool(scores, values, mask=None):
    """Softmax over the positions (masked ones set to -inf first), then a weighted average of the values."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)                   # (B, T)
    context = (weights.unsqueeze(1) @ values).squeeze(1)      # (B, 1, T) @ (B, T, d_v) -> (B, d_v)
    return context, weights
