import torch
import torch.nn as nn


class FeedForward(nn.Module):
    """The FeedForward of exercise 2, repeated so that this cell stands on its own."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class PostNormBlock(nn.Module):
    """Post-norm: LayerNorm after each residual sum."""

    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads, dropout=0.0, batch_first=True)
        self.ffn = FeedForward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        attn_mask = None
        if mask is not None:
            attn_mask = ~mask  # nn.MultiheadAttention: True = may NOT attend
            if attn_mask.dim() == 3:
                attn_mask = attn_mask.repeat_interleave(self.attn.num_heads, dim=0)
        x = self.norm1(x + self.attn(x, x, x, attn_mask=attn_mask, need_weights=False)[0])
        x = self.norm2(x + self.ffn(x))
        return x
