import torch


def project_qkv(x, W_q, W_k, W_v):
    """Project a sequence to queries, keys and values."""
    # torch.mm only takes 2-D matrices: no leading batch dims
    return torch.mm(x, W_q), torch.mm(x, W_k), torch.mm(x, W_v)
