import torch.nn as nn
import torch.nn.functional as F


class SwiGLU(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)), no biases."""

    def __init__(self, d_model, d_ff=None, multiple_of=256):
        super().__init__()
        if d_ff is None:
            hidden = 8 * d_model // 3                               # Llama's int(2 * 4 * d / 3)
            d_ff = -(-hidden // multiple_of) * multiple_of          # up to a multiple of multiple_of
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
