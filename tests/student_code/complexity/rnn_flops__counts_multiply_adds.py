def rnn_flops(T, d, batch=1):
    """Counts a multiply-add as one operation."""
    return 2 * batch * T * d * d
