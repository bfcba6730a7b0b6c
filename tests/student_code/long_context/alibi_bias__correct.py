import math

import torch


def alibi_bias(n_heads, T_q, T_k):
    """-m_h * |p_i - j| with the slopes of Press et al.'s code."""
    if n_heads < 1 or T_q > T_k or T_q < 0:
        raise ValueError("need n_heads >= 1 and 0 <= T_q <= T_k")

    def power_of_two_slopes(n):
        start = 2 ** (-8 / n)
        return [start ** (h + 1) for h in range(n)]

    closest = 2 ** math.floor(math.log2(n_heads))
    slopes = power_of_two_slopes(closest)
    if closest < n_heads:
        slopes += power_of_two_slopes(2 * closest)[0::2][: n_heads - closest]
    m = torch.tensor(slopes, dtype=torch.float32)
    i = torch.arange(T_q) + (T_k - T_q)
    j = torch.arange(T_k)
    return -m[:, None, None] * (i[:, None] - j[None, :]).abs().float()
