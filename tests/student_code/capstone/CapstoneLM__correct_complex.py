def _linear(n_in, n_out, std):
    layer = nn.Linear(n_in, n_out, bias=False)
    nn.init.normal_(layer.weight, 0.0, std)
    return layer


def _rotate(x, positions, base):
    """Rotate-half RoPE through complex numbers: (x_j, x_{j + d/2}) is the complex number x_j + i x_{j + d/2}."""
    half = x.shape[-1] // 2
    theta = 1.0 / base ** (torch.arange(half, dtype=torch.float64) * 2.0 / (2 * half))
    turn = torch.polar(torch.ones(len(positions), half, dtype=torch.float64), positions[:, None].double() * theta)
    z = torch.complex(x[..., :half].double(), x[..., half:].double()) * turn
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)


class _Attention(nn.Module):
    def __init__(self, d, h, h_kv, base, out_std):
        super().__init__()
        self.h, self.h_kv, self.dh, self.base = h, h_kv, d // h, base
        self.wq, self.wk = _linear(d, d, 0.02), _linear(d, h_kv * (d // h), 0.02)
        self.wv, self.wo = _linear(d, h_kv * (d // h), 0.02), _linear(d, d, out_std)

    def forward(self, x, cache):
        B, T, _ = x.shape
        start = cache[0].shape[-2] if cache is not None else 0
        pos = torch.arange(start, start + T)

        def split(y, n):
            return y.reshape(B, T, n, self.dh).permute(0, 2, 1, 3)

        q = _rotate(split(self.wq(x), self.h), pos, self.base)
        k = _rotate(split(self.wk(x), self.h_kv), pos, self.base)
        v = split(self.wv(x), self.h_kv)
        if cache is not None:
            k, v = torch.cat((cache[0], k), -2), torch.cat((cache[1], v), -2)
        allowed = torch.arange(k.shape[-2])[None, :] <= pos[:, None]  # key j is visible from position p iff j <= p
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
        return self.wo(y.permute(0, 2, 1, 3).reshape(B, T, self.h * self.dh)), (k, v)


class _SwiGLU(nn.Module):
    def __init__(self, d, d_ff, out_std):
        super().__init__()
        self.w1, self.w3, self.w2 = _linear(d, d_ff, 0.02), _linear(d, d_ff, 0.02), _linear(d_ff, d, out_std)

    def forward(self, x):
        gate = self.w1(x)
        return self.w2(gate * torch.sigmoid(gate) * self.w3(x))


class _Layer(nn.Module):
    def __init__(self, d, h, h_kv, d_ff, base, eps, out_std):
        super().__init__()
        self.attn_norm, self.ffn_norm = nn.RMSNorm(d, eps=eps), nn.RMSNorm(d, eps=eps)
        self.attn, self.ffn = _Attention(d, h, h_kv, base, out_std), _SwiGLU(d, d_ff, out_std)


class CapstoneLM(nn.Module):
    """Tied embeddings, pre-norm layers, a final RMSNorm; the layers' forward written out in the model's."""

    def __init__(self, vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, rope_base=10000.0, eps=1e-5):
        super().__init__()
        for s in (vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff):
            if type(s) is not int or s <= 0:
                raise ValueError("sizes must be positive ints")
        if d_model % n_heads != 0 or n_heads % n_kv_heads != 0 or d_model // n_heads % 2 != 0:
            raise ValueError("incompatible head counts")
        out_std = 0.02 / (2 * n_layers) ** 0.5
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.tok_emb.weight, 0.0, 0.02)
        self.blocks = nn.ModuleList(_Layer(d_model, n_heads, n_kv_heads, d_ff, rope_base, eps, out_std)
                                    for _ in range(n_layers))
        self.norm = nn.RMSNorm(d_model, eps=eps)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight

    def forward(self, tokens, past=None):
        if not (torch.is_tensor(tokens) and tokens.ndim == 2) or torch.is_floating_point(tokens) \
                or tokens.dtype in (torch.bool, torch.complex64, torch.complex128):
            raise ValueError("tokens: a (B, T) integer tensor")
        caches = [None] * len(self.blocks) if past is None else list(past)
        if len(caches) != len(self.blocks):
            raise ValueError("one cache entry per layer")
        x, present = self.tok_emb(tokens), []
        for layer, cache in zip(self.blocks, caches):
            a, kv = layer.attn(layer.attn_norm(x), cache)
            x = x + a
            x = x + layer.ffn(layer.ffn_norm(x))
            present.append(kv)
        return self.lm_head(self.norm(x)), present
