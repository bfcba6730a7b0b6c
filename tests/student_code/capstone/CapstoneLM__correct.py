def rotate_half_rope(x, start, base):
    """x (B, h, T, d_h) at positions start .. start + T - 1; feature j pairs with j + d_h / 2."""
    T, d = x.shape[-2], x.shape[-1]
    freqs = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = torch.arange(start, start + T, dtype=torch.float64, device=x.device)[:, None] * freqs
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class CapstoneAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads, rope_base):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head, self.rope_base = n_heads, n_kv_heads, d_model // n_heads, rope_base
        self.wq = nn.Linear(d_model, n_heads * self.d_head, bias=False)
        self.wk = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.wv = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.wo = nn.Linear(n_heads * self.d_head, d_model, bias=False)

    def forward(self, x, past=None):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.d_head).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.d_head).transpose(1, 2)
        T_past = 0 if past is None else past[0].shape[2]
        q = rotate_half_rope(q, T_past, self.rope_base)
        k = rotate_half_rope(k, T_past, self.rope_base)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        T_k = k.shape[2]
        mask = torch.ones(T, T_k, dtype=torch.bool, device=x.device).tril(diagonal=T_k - T)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return self.wo(out.transpose(1, 2).reshape(B, T, -1)), (k, v)


class CapstoneFFN(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class CapstoneBlock(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads, d_ff, rope_base, eps):
        super().__init__()
        self.attn_norm = nn.RMSNorm(d_model, eps=eps)
        self.attn = CapstoneAttention(d_model, n_heads, n_kv_heads, rope_base)
        self.ffn_norm = nn.RMSNorm(d_model, eps=eps)
        self.ffn = CapstoneFFN(d_model, d_ff)

    def forward(self, x, past=None):
        a, present = self.attn(self.attn_norm(x), past)
        h = x + a
        return h + self.ffn(self.ffn_norm(h)), present


class CapstoneLM(nn.Module):
    """A decoder-only language model: tied embeddings, pre-norm blocks (RMSNorm, GQA with RoPE, SwiGLU), a final
    RMSNorm; forward(tokens, past=None) -> (logits, present)."""

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, n_heads: int, n_kv_heads: int, d_ff: int,
                 rope_base: float = 10000.0, eps: float = 1e-5):
        super().__init__()
        sizes = (vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff)
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
            raise ValueError(f"the six sizes must be positive ints, got {sizes}")
        if d_model % n_heads or n_heads % n_kv_heads or (d_model // n_heads) % 2:
            raise ValueError("need n_heads | d_model, n_kv_heads | n_heads and an even head width")
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList([CapstoneBlock(d_model, n_heads, n_kv_heads, d_ff, rope_base, eps)
                                     for _ in range(n_layers)])
        self.norm = nn.RMSNorm(d_model, eps=eps)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p)
            elif name.endswith("attn.wo.weight") or name.endswith("ffn.w2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layers))
            else:
                nn.init.normal_(p, mean=0.0, std=0.02)

    def forward(self, tokens: torch.Tensor, past: list | None = None):
        """tokens (B, T) integer; past None or a list of one (k, v) per block, k (B, n_kv_heads, T_past, d_head).

        Returns:
            (logits (B, T, vocab_size), present: past extended by the T tokens' keys (after RoPE) and values).
        """
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point() \
                or tokens.is_complex() or tokens.dtype == torch.bool:
            raise ValueError("tokens must be a (B, T) integer tensor")
        if past is not None and len(past) != len(self.blocks):
            raise ValueError(f"past must hold one (k, v) per block ({len(self.blocks)}), got {len(past)}")
        x = self.tok_emb(tokens)
        present = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if past is None else past[i])
            present.append(kv)
        return self.lm_head(self.norm(x)), present
