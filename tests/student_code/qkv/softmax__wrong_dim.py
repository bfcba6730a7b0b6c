def softmax(x, dim=-1):
    """Softmax that always normalises the last axis, whatever dim says."""
    e = (x - x.amax(dim=-1, keepdim=True)).exp()
    return e / e.sum(dim=-1, keepdim=True)
