import torch


def layer_norm(x, gamma, beta, eps=1e-5):
    """LayerNorm over the last dim, written with var_mean (half precision in float32)."""
    dtype = x.dtype
    if dtype in (torch.float16, torch.bfloat16):
        x, gamma, beta = x.float(), gamma.float(), beta.float()
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return (gamma * (x - mean) / torch.sqrt(var + eps) + beta).to(dtype)
