import torch.nn as nn


class FeedForward(nn.Module):
    """Forgets the non-linearity: two linear layers collapse into one linear map."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(self.linear1(x))
