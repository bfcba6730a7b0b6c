def merge_heads(x):
    """view after a transpose: fails on a contiguous input, whose transpose is not contiguous."""
    *lead, h, T, d_head = x.shape
    return x.transpose(-3, -2).view(*lead, T, h * d_head)
