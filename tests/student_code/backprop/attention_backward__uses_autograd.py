import math

import torch


def attention_backward(grad_out, q, k, v, weights):
    # let autograd do it: recompute the forward pass (masking where the weights are 0) and differentiate
    with torch.enable_grad():
        q_, k_, v_ = (t.detach().requires_grad_() for t in (q, k, v))
        scores = q_ @ k_.transpose(-2, -1) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(weights == 0, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v_
        return torch.autograd.grad(out, (q_, k_, v_), grad_out)
