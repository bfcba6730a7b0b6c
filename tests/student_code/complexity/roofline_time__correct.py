def roofline_time(flops, hbm_bytes, peak_flops, bandwidth):
    """The slower of the arithmetic and the traffic, in float64 whatever the numbers' types."""
    for value in (flops, hbm_bytes, peak_flops, bandwidth):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"expected a number, got {value!r}")
    flops, hbm_bytes, peak_flops, bandwidth = float(flops), float(hbm_bytes), float(peak_flops), float(bandwidth)
    for value in (flops, hbm_bytes):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"counts must be finite and >= 0, got {value}")
    for value in (peak_flops, bandwidth):
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"peak_flops and bandwidth must be finite and > 0, got {value}")
    return max(flops / peak_flops, hbm_bytes / bandwidth)
