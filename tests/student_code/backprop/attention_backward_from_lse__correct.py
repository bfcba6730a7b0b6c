import math

import torch


def attention_backward_from_lse(grad_out, q, k, v, out, lse, causal=False):
    work = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    dO, Q, K, V, O = (t.to(work) for t in (grad_out, q, k, v, out))
    scale = 1 / math.sqrt(q.shape[-1])
    S = Q @ K.transpose(-2, -1) * scale                             # (..., T_q, T_k)
    if causal:
        T_q, T_k = S.shape[-2:]
        above = torch.ones(T_q, T_k, dtype=torch.bool).triu(1)      # key j > query i: hidden
        S = S.masked_fill(above, float("-inf"))
    P = torch.exp(S - lse.to(work).unsqueeze(-1))                   # the forward's weights, exactly
    D = (dO * O).sum(dim=-1, keepdim=True)                          # (..., T_q, 1)
    dV = P.transpose(-2, -1) @ dO                                   # (..., T_k, d_v)
    dP = dO @ V.transpose(-2, -1)                                   # (..., T_q, T_k)
    dS = P * (dP - D)                                               # (..., T_q, T_k)
    dQ = dS @ K * scale                                             # (..., T_q, d_k)
    dK = dS.transpose(-2, -1) @ Q * scale                           # (..., T_k, d_k)
    return dQ.to(q.dtype), dK.to(k.dtype), dV.to(v.dtype)
