def rnn_flops(T, d, batch=1):
    """d ** 2.0 is a float."""
    return 4 * batch * T * d**2.0
