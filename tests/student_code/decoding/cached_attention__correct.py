def cached_attention(q, k, v):
    """The newest T_q tokens attend to every token up to their own position (bottom-right causal)."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    if T_q > T_k:
        raise ValueError(f"T_q={T_q} > T_k={T_k}")
    allowed = torch.ones(T_q, T_k, dtype=torch.bool).tril(diagonal=T_k - T_q)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
