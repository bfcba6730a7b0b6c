import torch


def rnn_forward(x, W_xh, W_hh, b_h, h0=None):
    """Keeps the pre-activations a_t = x_t W_xh + h_{t-1} W_hh + b_h instead of h_t = tanh(a_t)."""
    B, T, _ = x.shape
    H = W_hh.shape[0]
    h = torch.zeros(B, H, dtype=x.dtype) if h0 is None else h0
    states = []
    for t in range(T):
        a = x[:, t] @ W_xh + h @ W_hh + b_h
        h = torch.tanh(a)
        states.append(a)
    return torch.stack(states, dim=1), a
