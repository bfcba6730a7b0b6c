import numpy as np
import torch


def chunked_attention(q, k, v, chunk_size, mask=None):
    """The whole score matrix in numpy, where torch cannot see it."""
    qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
    scores = qn @ np.swapaxes(kn, -1, -2) / np.sqrt(qn.shape[-1])
    if mask is not None:
        scores = np.where(mask.numpy(), scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    row_max = np.where(np.isinf(row_max), 0.0, row_max)
    e = np.exp(scores - row_max)
    total = e.sum(axis=-1, keepdims=True)
    out = (e / np.where(total > 0, total, 1.0)) @ vn
    return torch.from_numpy(out.astype(qn.dtype))
