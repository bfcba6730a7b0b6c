def rnn_flops(T, d, batch=1):
    """Two (d, d) matrix-vector products per step, 2 d^2 FLOPs each."""
    return 4 * batch * T * d * d
