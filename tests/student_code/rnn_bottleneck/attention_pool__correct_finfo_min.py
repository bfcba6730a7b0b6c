import torch


def attention_pool(scores, values, mask=None):
    """Masks with the most negative number of the scores' dtype (exp of it minus the row max is exactly 0)."""
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    context = torch.einsum("bt,btd->bd", weights, values)
    return context, weights
