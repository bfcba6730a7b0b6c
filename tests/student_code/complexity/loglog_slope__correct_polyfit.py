import numpy as np


def loglog_slope(xs, ys):
    x, y = np.array(xs, dtype=float), np.array(ys, dtype=float)
    if len(x) < 2:
        raise ValueError("at least two points are needed")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("all values must be positive")
    slope, _intercept = np.polyfit(np.log(x), np.log(y), 1)
    return float(slope)
