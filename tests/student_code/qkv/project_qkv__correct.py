import torch


def project_qkv(x, W_q, W_k, W_v):
    """Project a sequence to queries, keys and values: q = x @ W_q, k = x @ W_k, v = x @ W_v."""
    q = torch.einsum("...td,dk->...tk", x, W_q)
    k = torch.einsum("...td,dk->...tk", x, W_k)
    v = torch.einsum("...td,dv->...tv", x, W_v)
    return q, k, v
