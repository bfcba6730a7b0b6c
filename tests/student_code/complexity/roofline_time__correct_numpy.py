import numbers


def roofline_time(flops, hbm_bytes, peak_flops, bandwidth):
    """Both times in float64 with numpy, the larger one as a Python float."""
    if any(isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real)
           for x in (flops, hbm_bytes, peak_flops, bandwidth)):
        raise TypeError("flops, hbm_bytes, peak_flops and bandwidth must be numbers, not bools")
    counts = np.array([float(flops), float(hbm_bytes)])
    rates = np.array([float(peak_flops), float(bandwidth)])
    if not (np.isfinite(counts).all() and np.isfinite(rates).all()) or (counts < 0).any() or (rates <= 0).any():
        raise ValueError("counts must be >= 0 and rates > 0, all finite")
    return float(np.max(counts / rates))
