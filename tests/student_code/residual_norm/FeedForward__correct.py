import torch.nn as nn
import torch.nn.functional as F


class FeedForward(nn.Module):
    """linear2(relu(linear1(x)))."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(F.relu(self.linear1(x)))
