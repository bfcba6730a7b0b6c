def merge_heads(x):
    """Puts d_head before h: the features of the heads come out interleaved instead of side by side."""
    *lead, h, T, d_head = x.shape
    return x.movedim(-3, -1).reshape(*lead, T, d_head * h)
