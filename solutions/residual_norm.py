"""Chapter 6, residual connections and LayerNorm: the reference implementations.

Read top to bottom, in the chapter's order: layer normalisation written out; the position-wise
feed-forward network; the two ways of wiring attention, the feed-forward network, residual connections
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
        A new tensor of ``x``'s shape and dtype.

    Raises:
        ValueError: when ``gamma`` or ``beta`` is not a vector of length ``d``.
    """
    d = x.shape[-1]
    for name, p in (("gamma", gamma), ("beta", beta)):
        if p.shape != (d,):
            raise ValueError(f"{name} must have shape (d,) = ({d},), one entry per feature, got {tuple(p.shape)}")
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    centred = x - mean  # (..., d)
    var = (centred * centred).mean(dim=-1, keepdim=True)  # (..., 1), biased: divide by d
    x_hat = centred / torch.sqrt(var + eps)  # (..., d), mean 0 and variance ~1 per token
    return gamma * x_hat + beta


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
