import torch


def bahdanau_decoder_step(s_prev, y_prev, encoder_states, W_a, U_a, v_a, W_y, W_s, W_c, b, mask=None):
    """Attend with the previous state s_{i-1}, then run the tanh cell on y_{i-1}, s_{i-1} and the context c_i."""
    scores = torch.tanh((s_prev @ W_a)[:, None, :] + encoder_states @ U_a) @ v_a   # (B, T)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    alpha = torch.softmax(scores, dim=-1)                                          # (B, T)
    c = (alpha.unsqueeze(1) @ encoder_states).squeeze(1)                           # (B, d_h)
    s = torch.tanh(y_prev @ W_y + s_prev @ W_s + c @ W_c + b)                     # (B, H)
    return s, c, alpha
