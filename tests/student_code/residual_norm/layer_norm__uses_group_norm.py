import torch.nn.functional as F


def layer_norm(x, gamma, beta, eps=1e-5):
    """Right values, through group_norm with a single group over the features."""
    d = x.shape[-1]
    return F.group_norm(x.reshape(-1, d), 1, gamma, beta, eps).reshape(x.shape)
