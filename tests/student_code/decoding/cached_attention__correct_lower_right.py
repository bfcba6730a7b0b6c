from torch.nn.attention.bias import causal_lower_right


def cached_attention(q, k, v):
    if q.shape[-2] > k.shape[-2]:
        raise ValueError("more new queries than tokens")
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(q.shape[-2], k.shape[-2]))
