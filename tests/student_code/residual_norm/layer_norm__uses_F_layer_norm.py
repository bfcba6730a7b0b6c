import torch.nn.functional as F


def layer_norm(x, gamma, beta, eps=1e-5):
    """Right values, through PyTorch's built-in layer norm."""
    return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)
