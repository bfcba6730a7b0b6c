import torch


def document_mask(doc_ids, causal=True, positions=False):
    """(B, 1, T, T) bool: token i may attend to token j of the same document (and j <= i when causal)."""
    if not isinstance(doc_ids, torch.Tensor) or doc_ids.dim() != 2 or doc_ids.is_floating_point():
        raise ValueError("doc_ids must be a (B, T) integer tensor")
    T = doc_ids.shape[1]
    same = doc_ids[:, :, None] == doc_ids[:, None, :]  # (B, T, T)
    pos = (same & torch.ones(T, T, dtype=torch.bool).tril(-1)).sum(-1)  # tokens before i in i's document
    if causal:
        same = same & torch.ones(T, T, dtype=torch.bool).tril()
    if positions:
        return same[:, None], pos
    return same[:, None]  # (B, 1, T, T)
