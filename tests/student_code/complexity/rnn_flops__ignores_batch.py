def rnn_flops(T, d, batch=1):
    return 4 * T * d * d
