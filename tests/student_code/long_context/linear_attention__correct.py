import torch
import torch.nn.functional as F


def linear_attention(q, k, v, causal=False, eps=1e-6):
    """phi(Q) (phi(K)^T V) / (phi(Q) phi(K)^T 1 + eps), causal through cumulative sums."""
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError("causal linear attention needs T_q == T_k")
    dtype = q.dtype
    if dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
    fq, fk = F.elu(q) + 1, F.elu(k) + 1
    if causal:
        state = torch.einsum("...tk,...tv->...tkv", fk, v).cumsum(dim=-3)  # (..., T, d_k, d_v)
        norm = fk.cumsum(dim=-2)  # (..., T, d_k)
        num = torch.einsum("...tk,...tkv->...tv", fq, state)
        den = torch.einsum("...tk,...tk->...t", fq, norm)
    else:
        state = torch.einsum("...tk,...tv->...kv", fk, v)
        norm = fk.sum(dim=-2)
        num = torch.einsum("...tk,...kv->...tv", fq, state)
        den = torch.einsum("...tk,...k->...t", fq, norm)
    return (num / (den[..., None] + eps)).to(dtype)
