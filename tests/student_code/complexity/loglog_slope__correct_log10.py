import numpy as np


def loglog_slope(xs, ys):
    """log10 instead of ln: both axes scale by 1/ln 10, the slope does not change."""
    x, y = np.array(xs, dtype=float), np.array(ys, dtype=float)
    if len(x) < 2:
        raise ValueError("at least two points are needed")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("all values must be positive")
    return float(np.polyfit(np.log10(x), np.log10(y), 1)[0])
