import torch


def loglog_slope(xs, ys):
    """With torch in float64, through the normal equations of [log x, 1]."""
    x = torch.as_tensor(xs, dtype=torch.float64)
    y = torch.as_tensor(ys, dtype=torch.float64)
    if x.numel() < 2:
        raise ValueError("need two points or more")
    if (x <= 0).any() or (y <= 0).any():
        raise ValueError("values must be positive")
    A = torch.stack([x.log(), torch.ones_like(x)], dim=1)
    solution = torch.linalg.lstsq(A, y.log()[:, None]).solution
    return solution[0, 0].item()
