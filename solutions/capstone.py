"""Chapter 12, the whole model: the reference implementations.

In the chapter's order: the language-model loss (targets shifted by one, padding ignored), the learning-rate
schedule of linear warm-up and cosine decay, the decoder-only model assembled from the parts of the earlier
chapters (pre-norm blocks with ``nn.RMSNorm``, grouped-query attention through
``F.scaled_dot_product_attention(enable_gqa=True)`` with rotary positions, a SwiGLU feed-forward, tied
embeddings, GPT-2's scaled initialisation of the residual projections, a key/value cache), the sampling
distribution of temperature, top-k and top-p, generation with the cache, the two diagnostics of the debugging
clinic (per-head attention entropy under a mask, head redundancy), and causal grouped-query attention, the
fixed version of the chapter's bug hunt.

Conventions as everywhere in the course: shapes ``(B, T, ...)``, boolean masks with True = may attend, new
tensors returned and inputs left unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

HALF = (torch.float16, torch.bfloat16)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in HALF else dtype


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# ---------------------------------------------------------------------------------------------------
# the loss and the schedule


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor, pad_id: int | None = None) -> torch.Tensor:
    """Mean cross-entropy of predicting ``tokens[:, t + 1]`` from ``logits[:, t]``; targets equal to
    ``pad_id`` are left out of the mean.

    Args:
        logits: ``(B, T, V)`` floating, the model's outputs for the ``T`` input tokens.
        tokens: ``(B, T)`` integer, the same tokens the model read.
        pad_id: a target equal to it is ignored (it may lie outside ``[0, V)``, e.g. -100).

    Returns:
        a 0-dim tensor (float32 for half-precision logits, else the logits' dtype), differentiable.

    Raises:
        ValueError: shapes that do not fit, ``T < 2``, every target padded, a target outside ``[0, V)``.
    """
    if logits.dim() != 3 or tokens.dim() != 2 or tuple(logits.shape[:2]) != tuple(tokens.shape):
        raise ValueError(f"logits must be (B, T, V) and tokens (B, T), got {tuple(logits.shape)} and "
                         f"{tuple(tokens.shape)}")
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must be an integer tensor, got {tokens.dtype}")
    if tokens.shape[1] < 2:
        raise ValueError("a sequence of fewer than 2 tokens has nothing to predict")
    V = logits.shape[-1]
    targets = tokens[:, 1:].long()
    keep = targets != pad_id if pad_id is not None else torch.ones_like(targets, dtype=torch.bool)
    if not bool(keep.any()):
        raise ValueError("every target is padding: there is nothing to average")
    kept = targets[keep]
    if bool(((kept < 0) | (kept >= V)).any()):
        raise ValueError(f"a target lies outside the vocabulary [0, {V})")
    flat = logits[:, :-1][keep].to(_compute_dtype(logits.dtype))  # (N, V): the positions that predict
    return F.cross_entropy(flat, kept)


def warmup_cosine_lr(step: int, max_lr: float, warmup_steps: int, total_steps: int,
                     min_lr: float = 0.0) -> float:
    """The learning rate at ``step`` (counted from 0): linear warm-up, cosine decay, then ``min_lr``.

    ``max_lr * (step + 1) / warmup_steps`` for ``step < warmup_steps``; from ``warmup_steps`` to
    ``total_steps``, ``min_lr + (max_lr - min_lr) * (1 + cos(pi * progress)) / 2`` with ``progress =
    (step - warmup_steps) / (total_steps - warmup_steps)`` (1 when the two are equal); ``min_lr`` after.

    Raises:
        TypeError: a step count that is not an ``int`` (``bool`` included).
        ValueError: ``step < 0``, ``warmup_steps < 0``, ``total_steps < warmup_steps``, or not
            ``0 <= min_lr <= max_lr`` (finite).
    """
    for name, value in (("step", step), ("warmup_steps", warmup_steps), ("total_steps", total_steps)):
        if not _is_int(value):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if step < 0 or warmup_steps < 0 or total_steps < warmup_steps:
        raise ValueError(f"need step >= 0 and 0 <= warmup_steps <= total_steps, got step={step}, "
                         f"warmup_steps={warmup_steps}, total_steps={total_steps}")
    if not (math.isfinite(max_lr) and math.isfinite(min_lr) and 0 <= min_lr <= max_lr):
        raise ValueError(f"need 0 <= min_lr <= max_lr, finite; got min_lr={min_lr}, max_lr={max_lr}")
    if step < warmup_steps:
        return float(max_lr * (step + 1) / warmup_steps)
    if step > total_steps:
        return float(min_lr)
    span = total_steps - warmup_steps
    progress = (step - warmup_steps) / span if span else 1.0
    return float(min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress)))


# ---------------------------------------------------------------------------------------------------
# the model


def rope_rotate_half(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """RoPE in the rotate-half layout (pairs ``(i, i + d/2)``; chapter 11's two layouts), angles in float64."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)  # (d/2,)
    angles = positions.to(torch.float64)[:, None] * theta[None, :]  # (T, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    """Grouped-query self-attention with RoPE and a key/value cache (no biases)."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, rope_base: float):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head, self.rope_base = (n_heads, n_kv_heads, d_model // n_heads,
                                                                      rope_base)
        self.wq = nn.Linear(d_model, n_heads * self.d_head, bias=False)
        self.wk = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.wv = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.wo = nn.Linear(n_heads * self.d_head, d_model, bias=False)

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None):
        B, T, _ = x.shape
        T_past = 0 if past is None else past[0].shape[-2]
        positions = torch.arange(T_past, T_past + T, device=x.device)
        q = self.wq(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, d_head)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, H_kv, T, d_head)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.d_head).transpose(1, 2)
        q, k = rope_rotate_half(q, positions, self.rope_base), rope_rotate_half(k, positions, self.rope_base)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=-2), torch.cat([past[1], v], dim=-2)
        T_k = k.shape[-2]
        # bottom-right causal: query i stands at position T_past + i and sees keys j <= T_past + i
        mask = torch.arange(T_k, device=x.device)[None, :] <= positions[:, None]  # (T, T_k)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)  # (B, H, T, d_head)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1)), (k, v)


class SwiGLUFeedForward(nn.Module):
    """``w2(silu(w1 x) * w3 x)``, no biases."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    """A pre-norm block: ``x + attn(norm(x))``, then ``x + ffn(norm(x))``."""

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, d_ff: int, rope_base: float, eps: float):
        super().__init__()
        self.attn_norm = nn.RMSNorm(d_model, eps=eps)
        self.attn = Attention(d_model, n_heads, n_kv_heads, rope_base)
        self.ffn_norm = nn.RMSNorm(d_model, eps=eps)
        self.ffn = SwiGLUFeedForward(d_model, d_ff)

    def forward(self, x: torch.Tensor, past=None):
        a, present = self.attn(self.attn_norm(x), past)
        x = x + a
        return x + self.ffn(self.ffn_norm(x)), present


def init_weights(model: nn.Module, n_layers: int) -> None:
    """N(0, 0.02) for every matrix; N(0, 0.02 / sqrt(2 n_layers)) for the two projections that write into the
    residual stream (GPT-2's scaling); norms' weights 1."""
    residual_std = 0.02 / math.sqrt(2 * n_layers)
    for name, p in model.named_parameters():
        if p.dim() < 2:
            nn.init.ones_(p)
        elif name.endswith(("attn.wo.weight", "ffn.w2.weight")):
            nn.init.normal_(p, 0.0, residual_std)
        else:
            nn.init.normal_(p, 0.0, 0.02)


def build_capstone(model: nn.Module, vocab_size: int, d_model: int, n_layers: int, n_heads: int, n_kv_heads: int,
                   d_ff: int, rope_base: float = 10000.0, eps: float = 1e-5) -> None:
    """Give ``model`` (an ``nn.Module`` just initialised) the parts of a :class:`CapstoneLM` and initialise them."""
    for name, value in (("vocab_size", vocab_size), ("d_model", d_model), ("n_layers", n_layers),
                        ("n_heads", n_heads), ("n_kv_heads", n_kv_heads), ("d_ff", d_ff)):
        if not _is_int(value) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if d_model % n_heads or n_heads % n_kv_heads or (d_model // n_heads) % 2:
        raise ValueError(f"need n_heads | d_model, n_kv_heads | n_heads and an even d_head; got "
                         f"d_model={d_model}, n_heads={n_heads}, n_kv_heads={n_kv_heads}")
    model.tok_emb = nn.Embedding(vocab_size, d_model)
    model.blocks = nn.ModuleList(Block(d_model, n_heads, n_kv_heads, d_ff, rope_base, eps) for _ in range(n_layers))
    model.norm = nn.RMSNorm(d_model, eps=eps)
    model.lm_head = nn.Linear(d_model, vocab_size, bias=False)
    model.lm_head.weight = model.tok_emb.weight  # tied: one matrix reads tokens in and writes them out
    init_weights(model, n_layers)


class CapstoneLM(nn.Module):
    """A decoder-only language model: tied embeddings, pre-norm blocks, a final RMSNorm.

    ``forward(tokens, past=None) -> (logits, present)``: ``tokens`` ``(B, T)`` integer ids; ``past`` None or
    the ``present`` of an earlier call (a list of one ``(k, v)`` pair per block, each ``(B, n_kv_heads,
    T_past, d_head)``, keys stored after RoPE); the ``T`` tokens stand at positions ``T_past .. T_past + T -
    1`` and attend causally to the cache and to each other. ``logits`` is ``(B, T, vocab_size)``.
    """

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, n_heads: int, n_kv_heads: int, d_ff: int,
                 rope_base: float = 10000.0, eps: float = 1e-5):
        super().__init__()
        build_capstone(self, vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, rope_base, eps)

    def forward(self, tokens: torch.Tensor, past: list | None = None):
        if tokens.dim() != 2 or tokens.is_floating_point() or tokens.dtype == torch.bool:
            raise ValueError(f"tokens must be a (B, T) integer tensor, got {tuple(tokens.shape)} {tokens.dtype}")
        if past is not None and len(past) != len(self.blocks):
            raise ValueError(f"past holds {len(past)} layers' caches, the model has {len(self.blocks)}")
        x = self.tok_emb(tokens)
        present = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if past is None else past[i])
            present.append(kv)
        return self.lm_head(self.norm(x)), present


# ---------------------------------------------------------------------------------------------------
# sampling and generation


def sampling_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None) -> torch.Tensor:
    """The distribution the next token is drawn from, over the last dim of ``logits``.

    ``temperature == 0``: all mass on the largest logit (the first on ties). Otherwise, in this order: the
    logits are divided by ``temperature``; ``top_k`` keeps the tokens whose logit is at least the k-th largest
    (ties at the boundary kept); the softmax is taken; ``top_p`` keeps every token whose probability ``p_j``
    leaves ``sum(p_i for p_i > p_j) < top_p`` (the smallest most-probable set reaching ``top_p``, ties kept
    together), and the kept probabilities are renormalised. Computed in float32 for half precisions, returned
    in float32 (float64 for float64 logits).

    Raises:
        ValueError: ``temperature < 0`` or not finite, ``top_k`` not an int >= 1, ``top_p`` not in (0, 1].
    """
    if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None and not (_is_int(top_k) and top_k >= 1):
        raise ValueError(f"top_k must be an int >= 1 or None, got {top_k!r}")
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p!r}")
    if not logits.is_floating_point() or logits.dim() < 1:
        raise ValueError("logits must be a floating tensor (..., V)")
    z = logits.to(torch.float64 if logits.dtype == torch.float64 else torch.float32)
    if temperature == 0:
        return F.one_hot(z.argmax(dim=-1), z.shape[-1]).to(z.dtype)
    z = z / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    p = torch.softmax(z, dim=-1)
    if top_p is not None and top_p < 1:
        a = p.sort(dim=-1).values  # ascending
        cs = a.cumsum(dim=-1)
        # mass strictly above each value of p: the total minus the mass up to its last equal in the sorted order
        last = torch.searchsorted(a.contiguous(), p.contiguous(), right=True) - 1
        above = cs[..., -1:] - cs.gather(-1, last)
        p = p.masked_fill(above >= top_p, 0.0)
        p = p / p.sum(dim=-1, keepdim=True)
    return p


@torch.no_grad()
def generate(model, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 0.0, top_k: int | None = None,
             top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """``prompt`` ``(B, T)`` followed by ``max_new_tokens`` tokens, ``(B, T + max_new_tokens)``.

    The prompt is read once (``model(prompt)``), then each new token once (``model(token, past)``, a
    ``(B, 1)`` tensor and the cache the previous call returned); each token is drawn with
    ``torch.multinomial(sampling_probs(last logits, ...), 1, generator=generator)``.

    Raises:
        ValueError: ``max_new_tokens`` not an int >= 0, a prompt that is not ``(B, T)`` with ``T >= 1``.
    """
    if not (_is_int(max_new_tokens) and max_new_tokens >= 0):
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be (B, T) with T >= 1, got {tuple(prompt.shape)}")
    out = [prompt.clone()]
    if max_new_tokens == 0:
        return out[0]
    logits, past = model(prompt)
    for i in range(max_new_tokens):
        probs = sampling_probs(logits[:, -1], temperature, top_k, top_p)
        token = torch.multinomial(probs, 1, generator=generator).to(prompt.dtype)  # (B, 1)
        out.append(token)
        if i + 1 < max_new_tokens:
            logits, past = model(token, past)
    return torch.cat(out, dim=1)


# ---------------------------------------------------------------------------------------------------
# diagnostics


def attention_entropy(weights: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``(H,)``: each head's mean normalised entropy ``-sum_j p_j log p_j / log n``, over the batch and every
    query row with ``n >= 2`` allowed keys (1 = uniform over what the row may see, 0 = one key).

    Args:
        weights: ``(B, H, T_q, T_k)`` attention weights (rows sum to 1 over the allowed keys).
        mask: bool, broadcastable to ``weights``, True = may attend; None = every key allowed. Weights at
            masked positions are ignored; ``0 log 0 = 0``.

    Returns:
        float32 (float64 for float64 weights).

    Raises:
        ValueError: ``weights`` not 4-D, a mask that does not broadcast, a head without a row of >= 2 keys.
    """
    if weights.dim() != 4 or not weights.is_floating_point():
        raise ValueError(f"weights must be a floating (B, H, T_q, T_k) tensor, got {tuple(weights.shape)}")
    dt = torch.float64 if weights.dtype == torch.float64 else torch.float32
    p = weights.to(dt)
    if mask is None:
        allowed = torch.ones_like(p, dtype=torch.bool)
    else:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise ValueError("mask must be a bool tensor (True = may attend)")
        try:
            allowed = torch.broadcast_to(mask, p.shape)
        except RuntimeError:
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to {tuple(p.shape)}") from None
    p = p.masked_fill(~allowed, 0.0)
    plogp = torch.where(p > 0, p * torch.log(torch.where(p > 0, p, 1.0)), 0.0)
    n = allowed.sum(dim=-1)  # (B, H, T_q)
    rows = n >= 2
    ent = -plogp.sum(dim=-1) / torch.log(n.clamp(min=2).to(dt))  # (B, H, T_q)
    count = rows.sum(dim=(0, 2))  # (H,)
    if bool((count == 0).any()):
        raise ValueError("a head has no query row with two or more allowed keys: its entropy is undefined")
    return (ent * rows).sum(dim=(0, 2)) / count


def head_redundancy(weights: torch.Tensor) -> torch.Tensor:
    """``(H, H)``: the cosine similarity of every two heads' attention patterns, each flattened over
    ``(B, T_q, T_k)``; 1 on the diagonal. float32 (float64 for float64 weights).

    Raises:
        ValueError: ``weights`` not 4-D floating, or a head whose weights are all zero.
    """
    if weights.dim() != 4 or not weights.is_floating_point():
        raise ValueError(f"weights must be a floating (B, H, T_q, T_k) tensor, got {tuple(weights.shape)}")
    dt = torch.float64 if weights.dtype == torch.float64 else torch.float32
    w = weights.to(dt).transpose(0, 1).reshape(weights.shape[1], -1)  # (H, B * T_q * T_k)
    norms = w.norm(dim=-1)
    if bool((norms == 0).any()):
        raise ValueError("a head's weights are all zero: its similarity to the others is undefined")
    u = w / norms[:, None]
    return u @ u.T


# ---------------------------------------------------------------------------------------------------
# the bug hunt, fixed


def causal_gqa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal grouped-query attention: query head ``h`` reads key/value head ``h // (H / H_kv)``, query ``i``
    the keys ``j <= i``, scores scaled by ``1 / sqrt(d)``.

    Args:
        q: ``(B, H, T, d)``; k, v: ``(B, H_kv, T, d)`` with ``H_kv`` dividing ``H``.

    Raises:
        ValueError: shapes that do not fit.
    """
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4 or q.shape[0] != k.shape[0] or \
            q.shape[2:] != k.shape[2:] or q.shape[1] % k.shape[1]:
        raise ValueError(f"need q (B, H, T, d) and k, v (B, H_kv, T, d) with H_kv | H; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
