class GroupedQueryAttention(nn.Module):
    """Causal self-attention where groups of query heads share a key/value head."""

    def __init__(self, d_model, n_heads, n_kv_heads, bias=False):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        if n_heads % n_kv_heads != 0:
            raise ValueError("n_kv_heads must divide n_heads")
        self.h, self.h_kv, self.d_head = n_heads, n_kv_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, past=None):
        B, T, D = x.shape
        q = self.q_proj(x).view(B, T, self.h, self.d_head).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.h_kv, self.d_head).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.h_kv, self.d_head).transpose(1, 2)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        g = self.h // self.h_kv
        k_rep, v_rep = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        T_all = k.shape[2]
        scores = q @ k_rep.transpose(-2, -1) / math.sqrt(self.d_head)
        mask = torch.ones(T, T_all, dtype=torch.bool).tril(diagonal=T_all - T)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        out = (weights @ v_rep).transpose(1, 2).reshape(B, T, D)
        return self.out_proj(out), (k, v)
