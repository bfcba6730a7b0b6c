import torch
import torch.nn as nn


class FeedForward(nn.Module):
    """Puts the ReLU after the second layer, so the output can never be negative."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return torch.relu(self.linear2(self.linear1(x)))
