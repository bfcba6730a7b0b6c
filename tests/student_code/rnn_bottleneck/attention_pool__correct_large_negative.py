import torch


def attention_pool(scores, values, mask=None):
    """Masks with a very negative number instead of -inf (exp of it is exactly 0 in float32)."""
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = scores.softmax(dim=-1)
    context = torch.einsum("bt,btd->bd", weights, values)
    return context, weights
