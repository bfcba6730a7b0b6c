import torch


def bahdanau_decoder_step(s_prev, y_prev, encoder_states, W_a, U_a, v_a, W_y, W_s, W_c, b, mask=None):
    """einsum throughout, computed in float64 and rounded back to the inputs' dtype at the end."""
    dtype = s_prev.dtype
    s_prev, y_prev, h, W_a, U_a, v_a, W_y, W_s, W_c, b = (
        t.double() for t in (s_prev, y_prev, encoder_states, W_a, U_a, v_a, W_y, W_s, W_c, b))
    hidden = torch.tanh(torch.einsum("bh,ha->ba", s_prev, W_a)[:, None, :] + torch.einsum("btd,da->bta", h, U_a))
    scores = torch.einsum("bta,a->bt", hidden, v_a)
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf"), dtype=torch.float64))
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    alpha = e / e.sum(dim=-1, keepdim=True)
    c = torch.einsum("bt,btd->bd", alpha, h)
    s = torch.tanh(torch.einsum("by,yh->bh", y_prev, W_y) + torch.einsum("bk,kh->bh", s_prev, W_s)
                   + torch.einsum("bd,dh->bh", c, W_c) + b)
    return s.to(dtype), c.to(dtype), alpha.to(dtype)
