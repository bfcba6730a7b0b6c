def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """Sort once; the k-th largest logit and the mass above each probability read off the sorted rows, ties
    resolved by comparing values, not positions."""
    if type(temperature) not in (int, float) or temperature != temperature or temperature in (math.inf, -math.inf) \
            or temperature < 0:
        raise ValueError("bad temperature")
    if top_k is not None and (type(top_k) is not int or top_k <= 0):
        raise ValueError("bad top_k")
    if top_p is not None and (top_p <= 0 or top_p > 1):
        raise ValueError("bad top_p")
    work = torch.float64 if logits.dtype == torch.float64 else torch.float32
    x = logits.to(work)
    shape = x.shape
    x = x.reshape(-1, shape[-1])                      # (N, V): one row per distribution
    if temperature == 0:
        out = torch.zeros_like(x)
        out[torch.arange(x.shape[0]), x.argmax(dim=1)] = 1.0
        return out.reshape(shape)
    x = x / temperature
    if top_k is not None:
        ordered = x.sort(dim=1, descending=True).values
        kth = ordered[:, min(top_k, x.shape[1]) - 1:min(top_k, x.shape[1])]
        x = torch.where(x >= kth, x, torch.full_like(x, -math.inf))
    p = x.softmax(dim=1)
    if top_p is not None and top_p < 1:
        desc = p.sort(dim=1, descending=True).values
        before = desc.cumsum(dim=1) - desc            # mass of the sorted entries before each one
        out = torch.empty_like(p)
        for r in range(p.shape[0]):
            for j in range(p.shape[1]):
                first = int((desc[r] == p[r, j]).nonzero()[0])  # the first sorted entry equal to p_j
                out[r, j] = p[r, j] if before[r, first] < top_p else 0.0
        p = out / out.sum(dim=1, keepdim=True)
    return p.reshape(shape)
