import torch


def layer_norm_backward(grad_out, x, gamma, eps=1e-5):
    """dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)), g = grad_out * gamma; dgamma, dbeta summed."""
    dtype = x.dtype
    if dtype in (torch.float16, torch.bfloat16):
        grad_out, x, gamma = grad_out.float(), x.float(), gamma.float()
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    rstd = 1.0 / torch.sqrt(var + eps)
    x_hat = (x - mean) * rstd
    g = grad_out * gamma
    dx = rstd * (g - g.mean(dim=-1, keepdim=True) - x_hat * (g * x_hat).mean(dim=-1, keepdim=True))
    d = x.shape[-1]
    dgamma = (grad_out * x_hat).reshape(-1, d).sum(dim=0)
    dbeta = grad_out.reshape(-1, d).sum(dim=0)
    return dx.to(dtype), dgamma.to(dtype), dbeta.to(dtype)
