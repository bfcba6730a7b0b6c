class GroupedQueryAttention(nn.Module):
    """GQA without copying the kv heads: the query heads are reshaped into (kv head, member of the group)."""

    def __init__(self, d_model, n_heads, n_kv_heads, bias=False):
        super().__init__()
        if n_heads <= 0 or d_model % n_heads:
            raise ValueError("n_heads must divide d_model")
        if n_heads % n_kv_heads:
            raise ValueError("n_kv_heads must divide n_heads")
        self.n_heads, self.n_kv_heads, self.d_head = n_heads, n_kv_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias)
        self.out_proj = nn.Linear(d_model, d_model, bias)

    def forward(self, x, past=None):
        B, T, D = x.shape
        G, h_kv, d = self.n_heads // self.n_kv_heads, self.n_kv_heads, self.d_head
        q = self.q_proj(x).view(B, T, h_kv, G, d)  # head i = (i // G, i % G)
        k = self.k_proj(x).view(B, T, h_kv, d).permute(0, 2, 1, 3)
        v = self.v_proj(x).view(B, T, h_kv, d).permute(0, 2, 1, 3)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        T_all = k.shape[2]
        s = torch.einsum("btkgd,bksd->bkgts", q, k) / math.sqrt(d)
        keep = torch.arange(T_all)[None, :] <= torch.arange(T_all - T, T_all)[:, None]
        p = torch.softmax(torch.where(keep, s, float("-inf")), dim=-1)
        o = torch.einsum("bkgts,bksd->btkgd", p, v).reshape(B, T, D)
        return self.out_proj(o), (k, v)
