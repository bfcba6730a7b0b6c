import numpy as np


def loglog_slope(xs, ys):
    """Averages the slopes between consecutive points (after sorting by x)."""
    x, y = np.array(xs, dtype=float), np.array(ys, dtype=float)
    if len(x) < 2:
        raise ValueError("at least two points are needed")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("all values must be positive")
    order = np.argsort(x)
    lx, ly = np.log(x[order]), np.log(y[order])
    return float(np.mean(np.diff(ly) / np.diff(lx)))
