import torch


def softmax_backward(grad_p, p, dim=-1):
    # softmax(log p) = p, so differentiate torch.softmax at s = log p with autograd
    with torch.enable_grad():
        s = p.detach().log().requires_grad_()
        (grad_s,) = torch.autograd.grad(torch.softmax(s, dim=dim), s, grad_p)
    return grad_s
