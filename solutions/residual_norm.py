"""Chapter 6, residual connections and LayerNorm: the reference implementations.

Read top to bottom, in the chapter's order: layer normalisation written out, its backward pass by
hand, RMSNorm; the position-wise feed-forward network and its SwiGLU variant; the two ways of wiring attention, the feed-forward network, residual connections
and LayerNorm into a Transformer block, post-norm (the original Transformer) and pre-norm.

The blocks are numerically equal to ``nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0,
batch_first=True, norm_first=False/True)`` once the weights are copied (attribute names differ:
``attn`` is its ``self_attn``, ``ffn.linear1``/``ffn.linear2`` are its ``linear1``/``linear2``).

Conventions: a boolean mask is True where a query *may attend* to a key, the convention of the whole
course; ``nn.MultiheadAttention`` uses the opposite polarity, so the blocks negate the mask before
handing it over. Every function returns new tensors and leaves its arguments unchanged.
"""

from __future__ import annotations

import torch
import torch.nn as nn


def _opmath(x: torch.Tensor) -> torch.Tensor:
    """``x`` in the precision the statistics are computed in: float32 for float16/bfloat16, else x's own."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Layer normalisation over the last dimension: ``gamma * (x - mean) / sqrt(var + eps) + beta``.

    The mean and the *biased* variance (divide by ``d``, not ``d - 1``) are taken over the ``d``
    features of each token separately, so every token is normalised on its own, whatever the batch.
    ``eps`` goes *under* the square root: the divisor is ``sqrt(var + eps)``, never ``std + eps``.

    Args:
        x: ``(..., d)``, any number of leading dims.
        gamma: the gain, ``(d,)``.
        beta: the bias, ``(d,)``.
        eps: added to the variance, keeps the division finite for (nearly) constant tokens.

    Returns:
        A new tensor of ``x``'s shape and dtype (float16/bfloat16 computed in float32, rounded once). The
        variance is taken in two passes (centre, then square): ``E[x^2] - E[x]^2`` loses every digit for
        tokens around 1e4 with unit spread.

    Raises:
        ValueError: when ``gamma`` or ``beta`` is not a vector of length ``d``.
    """
    d = x.shape[-1]
    for name, p in (("gamma", gamma), ("beta", beta)):
        if p.shape != (d,):
            raise ValueError(f"{name} must have shape (d,) = ({d},), one entry per feature, got {tuple(p.shape)}")
    xf = _opmath(x)  # float16/bfloat16: the statistics in float32
    mean = xf.mean(dim=-1, keepdim=True)  # (..., 1)
    centred = xf - mean  # (..., d): two passes, so a large common offset cancels before squaring
    var = (centred * centred).mean(dim=-1, keepdim=True)  # (..., 1), biased: divide by d
    x_hat = centred / torch.sqrt(var + eps)  # (..., d), mean 0 and variance ~1 per token
    return (_opmath(gamma) * x_hat + _opmath(beta)).to(x.dtype)


def layer_norm_backward(grad_out: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor,
                        eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward pass of :func:`layer_norm`, written by hand (no autograd).

    With ``x_hat = (x - mean) * rstd``, ``rstd = 1 / sqrt(var + eps)`` per token and ``g = grad_out * gamma``
    (the gradient that reaches ``x_hat``), the chain rule through the mean and the variance gives, per token,

        ``dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))``   (means over the d features),

    and, summed over every token (every leading dim), ``dgamma = sum(grad_out * x_hat)``,
    ``dbeta = sum(grad_out)``. The two mean terms are the gradient through ``mean`` and through ``var``.

    Args:
        grad_out: ``(..., d)``, the gradient of the loss with respect to ``layer_norm``'s output; any
            strides (an expanded or transposed view is fine).
        x: ``(..., d)``, the input of the forward pass, same shape as ``grad_out``.
        gamma: ``(d,)``.
        eps: the forward pass's eps.

    Returns:
        ``(dx, dgamma, dbeta)``: ``dx`` of ``x``'s shape, ``dgamma`` and ``dbeta`` of shape ``(d,)``, all in
        ``x``'s dtype; float16/bfloat16 are computed in float32 and rounded once at the end.

    Raises:
        ValueError: when ``grad_out`` and ``x`` differ in shape or ``gamma`` is not ``(d,)``.
    """
    d = x.shape[-1]
    if grad_out.shape != x.shape:
        raise ValueError(f"grad_out must have x's shape {tuple(x.shape)}, got {tuple(grad_out.shape)}")
    if gamma.shape != (d,):
        raise ValueError(f"gamma must have shape (d,) = ({d},), got {tuple(gamma.shape)}")
    xf, gf, gam = _opmath(x), _opmath(grad_out), _opmath(gamma)
    mean = xf.mean(dim=-1, keepdim=True)
    centred = xf - mean
    rstd = torch.rsqrt((centred * centred).mean(dim=-1, keepdim=True) + eps)  # (..., 1)
    x_hat = centred * rstd
    g = gf * gam  # dL/dx_hat
    dx = rstd * (g - g.mean(dim=-1, keepdim=True) - x_hat * (g * x_hat).mean(dim=-1, keepdim=True))
    lead = tuple(range(x.dim() - 1))  # every dim but the features
    dgamma = (gf * x_hat).sum(dim=lead) if lead else gf * x_hat
    dbeta = gf.sum(dim=lead) if lead else gf.clone()
    return dx.to(x.dtype), dgamma.to(x.dtype), dbeta.to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Root-mean-square normalisation over the last dimension: ``weight * x / sqrt(mean(x^2) + eps)``.

    No mean is subtracted and there is no bias (Zhang & Sennrich, 2019). Equal to
    ``nn.RMSNorm(d, eps=eps)`` with ``weight`` as its weight. The default ``eps = 1e-6`` is Llama's;
    ``nn.RMSNorm``'s own default (``eps=None``) is the machine epsilon of float32 (of float64 for float64
    inputs), which is *not* this function's default. The mean of squares of float16/bfloat16 inputs is
    taken in float32 (``x * x`` overflows float16 from |x| > 256) and the result is rounded once.

    Args:
        x: ``(..., d)``, any floating dtype, any strides.
        weight: the gain, ``(d,)``.
        eps: added to the mean of squares, under the square root.

    Returns:
        A new tensor of ``x``'s shape and dtype.

    Raises:
        ValueError: when ``weight`` is not ``(d,)``.
    """
    d = x.shape[-1]
    if weight.shape != (d,):
        raise ValueError(f"weight must have shape (d,) = ({d},), one entry per feature, got {tuple(weight.shape)}")
    xf = _opmath(x)
    ms = (xf * xf).mean(dim=-1, keepdim=True)  # (..., 1), the mean square of each token
    return (_opmath(weight) * (xf / torch.sqrt(ms + eps))).to(x.dtype)


class FeedForward(nn.Module):
    """The position-wise feed-forward network ``linear2(relu(linear1(x)))``.

    ``linear1 = nn.Linear(d_model, d_ff)``, ``linear2 = nn.Linear(d_ff, d_model)``. It acts on every
    token separately (the same weights at every position); the paper uses ``d_ff = 4 * d_model``.
    """

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., d_model) -> (..., d_model)``."""
        return self.linear2(torch.relu(self.linear1(x)))  # (..., d_ff) in between


class SwiGLU(nn.Module):
    """The SwiGLU feed-forward network (Shazeer, 2020): ``down_proj(silu(gate_proj(x)) * up_proj(x))``.

    Three bias-free linear maps, named as in Llama's MLP: ``gate_proj`` and ``up_proj`` are
    ``nn.Linear(d_model, d_ff, bias=False)``, ``down_proj`` is ``nn.Linear(d_ff, d_model, bias=False)``. The SiLU
    (Swish with beta = 1) is applied to the *gate* branch only; the up branch enters the product linearly.
    With ``d_ff = 8/3 * d_model`` it has the parameters of a ReLU FFN of width ``4 * d_model`` (without biases).
    ``d_ff=None`` takes Llama's width, :func:`swiglu_hidden` (``int(8 d_model / 3)`` rounded *up* to a multiple of
    ``multiple_of``: 11008 for ``d_model = 4096``); a ``d_ff`` given is used as it is.
    """

    def __init__(self, d_model: int, d_ff: int | None = None, multiple_of: int = 256):
        super().__init__()
        if d_ff is None:
            d_ff = swiglu_hidden(d_model, multiple_of)
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., d_model) -> (..., d_model)``, every token on its own."""
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))  # (..., d_ff) inside


def swiglu_hidden(d_model: int, multiple_of: int = 256) -> int:
    """Llama's width for a SwiGLU FFN: ``2/3`` of ``4 * d_model``, rounded *up* to a multiple of ``multiple_of``."""
    hidden = int(2 * (4 * d_model) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def mha_mask(mask: torch.Tensor | None, x: torch.Tensor, n_heads: int) -> torch.Tensor | None:
    """Turn the course's mask (True = may attend) into ``nn.MultiheadAttention``'s (True = may NOT).

    Args:
        mask: None, a bool ``(T, T)`` mask shared by every sequence, or a bool mask broadcastable to
            ``(B, T, T)``, one per sequence.
        x: the block's input ``(B, T, d_model)``, for the sizes.
        n_heads: the number of heads; ``nn.MultiheadAttention`` wants a 3-D mask as
            ``(B * n_heads, T, T)`` with the heads of one sequence next to each other.

    Returns:
        None, or a bool ``(T, T)`` or ``(B * n_heads, T, T)`` tensor, True where attention is forbidden.

    Raises:
        TypeError: when the mask is not a bool tensor.
        ValueError: when it is neither ``(T, T)`` nor broadcastable to ``(B, T, T)``.
    """
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        kind = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a bool tensor (True = may attend), got {kind}")
    B, T = x.shape[0], x.shape[-2]
    if mask.dim() == 2 and mask.shape == (T, T):
        return ~mask
    if mask.dim() == 3 and x.dim() == 3:
        try:
            per_sequence = mask.expand(B, T, T)
        except RuntimeError:
            pass
        else:
            return ~per_sequence.repeat_interleave(n_heads, dim=0)  # (B * n_heads, T, T): b-major
    raise ValueError(f"mask must have shape (T, T) = ({T}, {T}) or broadcast to (B, T, T) = ({B}, {T}, {T}), "
                     f"got {tuple(mask.shape)}")


def self_attention(attn: nn.MultiheadAttention, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The attention sub-layer: ``x`` attends to itself through ``attn``; ``(B, T, d) -> (B, T, d)``."""
    out, _ = attn(x, x, x, attn_mask=mha_mask(mask, x, attn.num_heads), need_weights=False)
    return out


class PostNormBlock(nn.Module):
    """A post-norm Transformer block (the original Transformer): LayerNorm *after* each residual sum.

    ``x = norm1(x + attn(x))``, then ``x = norm2(x + ffn(x))``. Equal to
    ``nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0, batch_first=True, norm_first=False)``.

    Submodules: ``attn = nn.MultiheadAttention(d_model, n_heads, dropout=0, batch_first=True)``,
    ``ffn = FeedForward(d_model, d_ff)``, ``norm1``, ``norm2 = nn.LayerNorm(d_model)``.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads, dropout=0.0, batch_first=True)
        self.ffn = FeedForward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x``: ``(B, T, d_model)``; ``mask``: None, bool ``(T, T)`` or ``(B, T, T)``, True = may
        attend, no fully masked row. Returns ``(B, T, d_model)``, every token LayerNorm-ed."""
        x = self.norm1(x + self_attention(self.attn, x, mask))  # the sum is normalised
        x = self.norm2(x + self.ffn(x))
        return x


class PreNormBlock(nn.Module):
    """A pre-norm Transformer block: LayerNorm on the *input* of each sub-layer, a clean residual path.

    ``x = x + attn(norm1(x))``, then ``x = x + ffn(norm2(x))``. Equal to
    ``nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0, batch_first=True, norm_first=True)``.
    A stack of pre-norm blocks is usually followed by one final LayerNorm (not part of the block).

    Submodules as in :class:`PostNormBlock`.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads, dropout=0.0, batch_first=True)
        self.ffn = FeedForward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Same contract as :meth:`PostNormBlock.forward`; the output is *not* normalised."""
        x = x + self_attention(self.attn, self.norm1(x), mask)  # the residual carries x itself
        x = x + self.ffn(self.norm2(x))
        return x
