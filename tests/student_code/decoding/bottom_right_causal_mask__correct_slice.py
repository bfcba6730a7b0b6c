def bottom_right_causal_mask(T_q, T_k, device=None):
    # the last T_q rows of the square causal mask of the whole sequence
    if T_q < 0 or T_k < 0 or T_q > T_k:
        raise ValueError("bad lengths")
    square = torch.tril(torch.ones(T_k, T_k, device=device)).bool()
    return square[T_k - T_q:].clone()
