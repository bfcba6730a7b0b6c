def merge_heads(x):
    """Swap heads and tokens back, then flatten (h, d_head) into h * d_head; reshape copies if it must."""
    *lead, h, T, d_head = x.shape
    return x.transpose(-3, -2).reshape(*lead, T, h * d_head)
