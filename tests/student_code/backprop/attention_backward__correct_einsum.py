import math

import torch


def attention_backward(grad_out, q, k, v, weights):
    """Every product written as an einsum over named axes: i = query, j = key, c/m = features."""
    grad_v = torch.einsum("...ij,...ic->...jc", weights, grad_out)
    grad_weights = torch.einsum("...ic,...jc->...ij", grad_out, v)
    grad_scores = weights * (grad_weights - torch.einsum("...ij,...ij->...i", grad_weights, weights)[..., None])
    grad_q = torch.einsum("...ij,...jm->...im", grad_scores, k) / math.sqrt(q.shape[-1])
    grad_k = torch.einsum("...ij,...im->...jm", grad_scores, q) / math.sqrt(q.shape[-1])
    return grad_q, grad_k, grad_v
