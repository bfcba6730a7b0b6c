import math

import torch


def slopes_for(n):
    if n & (n - 1) == 0:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    c = 2 ** int(math.log2(n))
    extra = slopes_for(2 * c)
    return slopes_for(c) + [extra[i] for i in range(0, 2 * c, 2)][: n - c]


def alibi_bias(n_heads, T_q, T_k):
    if n_heads < 1:
        raise ValueError("n_heads must be positive")
    if T_q > T_k:
        raise ValueError("more queries than keys")
    slopes = slopes_for(n_heads)
    out = torch.zeros(n_heads, T_q, T_k)
    for h in range(n_heads):
        for i in range(T_q):
            p = T_k - T_q + i
            out[h, i] = -slopes[h] * torch.tensor([abs(p - j) for j in range(T_k)], dtype=torch.float64)
    return out
