import math

import torch


def chunked_attention(q, k, v, chunk_size, mask=None):
    """One (T_q, T_k) matrix per sequence and head, one after the other: still T^2 memory."""
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    T_q, T_k = q.shape[-2], k.shape[-2]
    qf = q.expand(*lead, *q.shape[-2:]).reshape(-1, T_q, q.shape[-1])
    kf = k.expand(*lead, *k.shape[-2:]).reshape(-1, T_k, k.shape[-1])
    vf = v.expand(*lead, *v.shape[-2:]).reshape(-1, T_k, v.shape[-1])
    mf = None if mask is None else mask.expand(*lead, T_q, T_k).reshape(-1, T_q, T_k)
    outs = []
    for i in range(qf.shape[0]):
        scores = qf[i] @ kf[i].T / math.sqrt(q.shape[-1])
        if mf is not None:
            scores = scores.masked_fill(~mf[i], float("-inf"))
        outs.append(torch.softmax(scores, dim=-1).nan_to_num(0.0) @ vf[i])
    return torch.stack(outs).reshape(*lead, T_q, v.shape[-1])
