import torch
import torch.nn.functional as F


def linear_attention(q, k, v, causal=False, eps=1e-6):
    """The recurrent view: a (d_k, d_v) state and a d_k normaliser, updated one position at a time, in float64."""
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError("T_q must equal T_k when causal")
    fq, fk, v64 = F.elu(q.double()) + 1, F.elu(k.double()) + 1, v.double()
    if not causal:
        S = fk.transpose(-2, -1) @ v64
        z = fk.sum(-2)
        return ((fq @ S) / ((fq * z[..., None, :]).sum(-1, keepdim=True) + eps)).to(q.dtype)
    S = torch.zeros(*q.shape[:-2], q.shape[-1], v.shape[-1], dtype=torch.float64)
    z = torch.zeros(*q.shape[:-2], q.shape[-1], dtype=torch.float64)
    rows = []
    for t in range(q.shape[-2]):
        S = S + fk[..., t, :, None] * v64[..., t, None, :]
        z = z + fk[..., t, :]
        num = (fq[..., t, None, :] @ S).squeeze(-2)
        rows.append(num / ((fq[..., t, :] * z).sum(-1, keepdim=True) + eps))
    return torch.stack(rows, dim=-2).to(q.dtype)
