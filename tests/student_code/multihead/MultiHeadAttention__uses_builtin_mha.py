import torch.nn as nn
import torch.nn.functional as F


class MultiHeadAttention(nn.Module):
    """Right values, by handing the parameters to PyTorch's functional multi-head attention."""

    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError("n_heads must divide d_model")
        self.d_model, self.n_heads = d_model, n_heads
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, mask=None, return_weights=False):
        B, T, _ = x.shape
        attn_mask = None
        if mask is not None:
            attn_mask = ~mask.expand(B, self.n_heads, T, T).reshape(B * self.n_heads, T, T)
        xt = x.transpose(0, 1)  # (T, B, d_model)
        out, weights = F.multi_head_attention_forward(
            xt, xt, xt, self.d_model, self.n_heads, self.qkv_proj.weight, self.qkv_proj.bias, None, None, False,
            0.0, self.out_proj.weight, self.out_proj.bias, training=False, need_weights=return_weights,
            attn_mask=attn_mask, average_attn_weights=False)
        out = out.transpose(0, 1)
        return (out, weights) if return_weights else out
