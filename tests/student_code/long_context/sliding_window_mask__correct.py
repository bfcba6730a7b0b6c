import torch


def sliding_window_mask(T_q, T_k, window):
    if window < 1 or T_q < 0 or T_q > T_k:
        raise ValueError("need window >= 1 and 0 <= T_q <= T_k")
    p = torch.arange(T_q)[:, None] + (T_k - T_q)
    j = torch.arange(T_k)[None, :]
    return (j <= p) & (j > p - window)
