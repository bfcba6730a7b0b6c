def decode_step(q, k_new, v_new, past=None):
    k_past, v_past = past if past is not None else (k_new[..., :0, :], v_new[..., :0, :])
    k_all = torch.cat((k_past, k_new), dim=-2)
    v_all = torch.cat((v_past, v_new), dim=-2)
    T_q, T_k = q.shape[-2], k_all.shape[-2]
    mask = torch.ones(T_q, T_k, dtype=torch.bool).tril(diagonal=T_k - T_q)  # bottom-right
    return F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask), (k_all, v_all)
