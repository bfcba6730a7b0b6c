import numpy as np


def loglog_slope(xs, ys):
    """Regresses log x on log y: the arguments of polyfit swapped."""
    x, y = np.array(xs, dtype=float), np.array(ys, dtype=float)
    if len(x) < 2:
        raise ValueError("at least two points are needed")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("all values must be positive")
    return float(np.polyfit(np.log(y), np.log(x), 1)[0])
