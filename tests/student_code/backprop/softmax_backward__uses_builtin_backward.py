import torch


def softmax_backward(grad_p, p, dim=-1):
    # PyTorch's own softmax backward kernel
    return torch._softmax_backward_data(grad_p, p, dim % p.dim() if p.dim() else 0, p.dtype)
