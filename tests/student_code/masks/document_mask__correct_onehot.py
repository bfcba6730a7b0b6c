import torch


def document_mask(doc_ids, causal=True, positions=False):
    """(B, 1, T, T) bool: token i may attend to token j of the same document (and j <= i when causal)."""
    if doc_ids.dim() != 2 or doc_ids.dtype.is_floating_point:
        raise ValueError("doc_ids must be a (B, T) integer tensor")
    _, dense = torch.unique(doc_ids, return_inverse=True)  # ids renumbered 0..n-1, any order and sign
    onehot = torch.nn.functional.one_hot(dense).float()  # (B, T, n)
    same = torch.einsum("bin,bjn->bij", onehot, onehot) > 0.5
    if causal:
        i = torch.arange(doc_ids.shape[1])
        same = same & (i[None, :] <= i[:, None])
    if positions:  # a running count per document, read at each token's own document
        pos = (onehot.cumsum(dim=1) * onehot).sum(-1).long() - 1
        return same.unsqueeze(1), pos
    return same.unsqueeze(1)
