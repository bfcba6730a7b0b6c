import numpy as np


def loglog_slope(xs, ys):
    """Right fit, but no checks: log(0) = -inf and log(-4) = nan slip through."""
    return float(np.polyfit(np.log(np.asarray(xs, dtype=float)), np.log(np.asarray(ys, dtype=float)), 1)[0])
