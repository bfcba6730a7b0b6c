import numpy as np


def loglog_slope(xs, ys):
    """Least-squares slope of log y on log x."""
    x = np.asarray(xs, dtype=np.float64)
    y = np.asarray(ys, dtype=np.float64)
    if x.size < 2 or x.shape != y.shape:
        raise ValueError("need at least two (x, y) pairs")
    if (x <= 0).any() or (y <= 0).any():
        raise ValueError("log-log fit needs positive values")
    lx, ly = np.log(x), np.log(y)
    lx = lx - lx.mean()
    return float((lx * (ly - ly.mean())).sum() / (lx * lx).sum())
