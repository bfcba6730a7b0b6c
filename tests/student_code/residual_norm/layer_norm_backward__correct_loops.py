import torch


def layer_norm_backward(grad_out, x, gamma, eps=1e-5):
    """One token at a time, in float64, with the chain rule through mean and variance written as sums."""
    d = x.shape[-1]
    xs = x.double().reshape(-1, d)
    gs = grad_out.double().reshape(-1, d)
    gam = gamma.double()
    dx = torch.empty_like(xs)
    dgamma = torch.zeros(d, dtype=torch.float64)
    dbeta = torch.zeros(d, dtype=torch.float64)
    for t in range(xs.shape[0]):
        mu = xs[t].sum() / d
        c = xs[t] - mu
        r = (c @ c / d + eps) ** -0.5
        xh = c * r
        g = gs[t] * gam
        dx[t] = r * (g - g.sum() / d - xh * (g @ xh) / d)
        dgamma += gs[t] * xh
        dbeta += gs[t]
    return dx.reshape(x.shape).to(x.dtype), dgamma.to(x.dtype), dbeta.to(x.dtype)
