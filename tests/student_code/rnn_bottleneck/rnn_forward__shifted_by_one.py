import torch


def rnn_forward(x, W_xh, W_hh, b_h, h0=None):
    """Stores the state before each update, so outputs[:, t] is h_{t-1} (h0 first, h_T missing)."""
    B, T, _ = x.shape
    H = W_hh.shape[0]
    h = torch.zeros(B, H, dtype=x.dtype) if h0 is None else h0
    states = []
    for t in range(T):
        states.append(h)
        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)
    return torch.stack(states, dim=1), h
