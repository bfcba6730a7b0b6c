import torch


def rnn_forward(x, W_xh, W_hh, b_h, h0=None):
    """Run a tanh RNN over x (B, T, d_in); return all states (B, T, H) and the last one (B, H)."""
    B, T, _ = x.shape
    H = W_hh.shape[0]
    h = torch.zeros(B, H, dtype=x.dtype) if h0 is None else h0
    states = []
    for t in range(T):
        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b_h)
        states.append(h)
    return torch.stack(states, dim=1), h
