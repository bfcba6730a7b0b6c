def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """Exercise 4 again (this cell stands alone), the nucleus by sorting with ties compared by value."""
    if type(temperature) not in (int, float) or not math.isfinite(temperature) or temperature < 0:
        raise ValueError("bad temperature")
    if top_k is not None and (type(top_k) is not int or top_k < 1):
        raise ValueError("bad top_k")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError("bad top_p")
    z = logits.to(torch.float64 if logits.dtype == torch.float64 else torch.float32)
    if temperature == 0:
        return torch.zeros_like(z).scatter(-1, z.argmax(-1, keepdim=True), 1.0)
    z = z / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = torch.where(z >= z.sort(-1, descending=True).values[..., top_k - 1:top_k], z, -math.inf)
    p = z.softmax(-1)
    if top_p is not None:
        asc = p.sort(-1).values
        total = asc.sum(-1, keepdim=True)
        upto = asc.cumsum(-1).gather(-1, torch.searchsorted(asc, p, right=True) - 1)  # mass of the p_i <= p_j
        p = torch.where(total - upto < top_p, p, 0.0)
        p = p / p.sum(-1, keepdim=True)
    return p


def generate(model, prompt, max_new_tokens, temperature=0.0, top_k=None, top_p=None, generator=None):
    """The output allocated once and filled column by column; the cache threaded through the calls."""
    if type(max_new_tokens) is not int or max_new_tokens < 0:
        raise ValueError("max_new_tokens must be a non-negative int")
    if prompt.ndim != 2 or prompt.size(1) == 0:
        raise ValueError("prompt must be (B, T), T >= 1")
    B, T = prompt.shape
    out = torch.empty(B, T + max_new_tokens, dtype=prompt.dtype, device=prompt.device)
    out[:, :T] = prompt
    with torch.no_grad():
        feed, past = prompt, None
        for t in range(T, T + max_new_tokens):
            logits, past = model(feed) if past is None else model(feed, past)
            probs = sampling_probs(logits[:, -1, :], temperature=temperature, top_k=top_k, top_p=top_p)
            out[:, t] = torch.multinomial(probs, num_samples=1, generator=generator)[:, 0]
            feed = out[:, t:t + 1]
    return out
