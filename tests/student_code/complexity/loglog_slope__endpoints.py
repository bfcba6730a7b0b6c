import math


def loglog_slope(xs, ys):
    """Slope between the first and the last point only."""
    xs, ys = list(map(float, xs)), list(map(float, ys))
    if len(xs) < 2:
        raise ValueError("at least two points are needed")
    if min(xs) <= 0 or min(ys) <= 0:
        raise ValueError("all values must be positive")
    return (math.log(ys[-1]) - math.log(ys[0])) / (math.log(xs[-1]) - math.log(xs[0]))
