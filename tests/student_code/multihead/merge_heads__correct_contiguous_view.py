def merge_heads(x):
    """transpose, make the memory contiguous, then view."""
    *lead, h, T, d_head = x.shape
    return x.transpose(-3, -2).contiguous().view(*lead, T, h * d_head)
