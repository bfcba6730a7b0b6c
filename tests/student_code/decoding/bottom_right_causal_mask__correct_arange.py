def bottom_right_causal_mask(T_q, T_k, device=None):
    if min(T_q, T_k) < 0 or T_q > T_k:
        raise ValueError(f"need 0 <= T_q <= T_k, got {T_q}, {T_k}")
    query_pos = torch.arange(T_k - T_q, T_k, device=device)  # absolute positions of the new queries
    key_pos = torch.arange(T_k, device=device)
    return key_pos[None, :] <= query_pos[:, None]
