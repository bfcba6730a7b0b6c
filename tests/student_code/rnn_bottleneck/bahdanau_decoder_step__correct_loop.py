import torch


def bahdanau_decoder_step(s_prev, y_prev, encoder_states, W_a, U_a, v_a, W_y, W_s, W_c, b, mask=None):
    """The paper's equations one source position at a time: scores, a stable softmax, the context, the cell."""
    B, T, _ = encoder_states.shape
    query = torch.matmul(s_prev, W_a)                                    # (B, a)
    columns = []
    for j in range(T):
        hidden = torch.tanh(query + torch.matmul(encoder_states[:, j, :], U_a))
        columns.append((hidden * v_a).sum(dim=-1))                      # e_ij for every sequence: (B,)
    scores = torch.stack(columns, dim=1)                                 # (B, T)
    if mask is not None:
        scores = torch.where(mask.expand(B, T), scores, torch.full_like(scores, float("-inf")))
    weights = torch.exp(scores - scores.max(dim=1, keepdim=True).values)
    alpha = weights / weights.sum(dim=1, keepdim=True)
    c = sum(alpha[:, j, None] * encoder_states[:, j, :] for j in range(T))
    s = torch.tanh(torch.matmul(y_prev, W_y) + torch.matmul(s_prev, W_s) + torch.matmul(c, W_c) + b)
    return s, c, alpha
