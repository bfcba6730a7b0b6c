import torch


def rnn_forward(x, W_xh, W_hh, b_h, h0=None):
    """Run a tanh RNN over x (B, T, d_in), writing each state into a preallocated output."""
    B, T, _ = x.shape
    H = W_xh.shape[1]
    outputs = x.new_zeros(B, T, H)
    h = x.new_zeros(B, H) if h0 is None else h0
    for t in range(T):
        h = torch.tanh(torch.matmul(x[:, t, :], W_xh) + torch.matmul(h, W_hh) + b_h)
        outputs[:, t, :] = h
    return outputs, h
