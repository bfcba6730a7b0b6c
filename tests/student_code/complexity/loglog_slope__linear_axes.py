import numpy as np


def loglog_slope(xs, ys):
    """Fits a straight line to y against x, not to the logarithms."""
    x, y = np.array(xs, dtype=float), np.array(ys, dtype=float)
    if len(x) < 2:
        raise ValueError("at least two points are needed")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("all values must be positive")
    return float(np.polyfit(x, y, 1)[0])
