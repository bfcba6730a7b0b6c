import torch
import torch.nn as nn


class SwiGLU(nn.Module):
    """The three products written with einsum on the weights, SiLU as z * sigmoid(z)."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        z = torch.einsum("...d,fd->...f", x, self.gate_proj.weight)
        u = torch.einsum("...d,fd->...f", x, self.up_proj.weight)
        return torch.einsum("...f,df->...d", z * torch.sigmoid(z) * u, self.down_proj.weight)
