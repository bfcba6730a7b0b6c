class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, bias: bool = False):
        super().__init__()
        if d_model % n_heads or n_heads % n_kv_heads:
            raise ValueError(f"bad head counts: d_model={d_model}, n_heads={n_heads}, n_kv_heads={n_kv_heads}")
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * d_head, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, past=None):
        B, T, _ = x.shape
        q = self.q_proj(x).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)
        k = self.k_proj(x).unflatten(-1, (self.n_kv_heads, -1)).transpose(1, 2)
        v = self.v_proj(x).unflatten(-1, (self.n_kv_heads, -1)).transpose(1, 2)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=-2), torch.cat([past[1], v], dim=-2)
        T_k = k.shape[-2]
        mask = torch.ones(T, T_k, dtype=torch.bool).tril(T_k - T)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return self.out_proj(out.transpose(1, 2).flatten(-2)), (k, v)
