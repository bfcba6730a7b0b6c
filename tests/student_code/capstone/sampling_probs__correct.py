def sampling_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None) -> torch.Tensor:
    """The distribution the next token is drawn from: temperature, then top-k, softmax, then top-p."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be finite and >= 0, got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be an int >= 1, got {top_k!r}")
    if top_p is not None and not (0 < top_p <= 1):
        raise ValueError(f"top_p must lie in (0, 1], got {top_p!r}")
    z = logits.double() if logits.dtype == torch.float64 else logits.float()
    V = z.shape[-1]
    if temperature == 0:
        return F.one_hot(z.argmax(dim=-1), V).to(z.dtype)
    z = z / temperature
    if top_k is not None and top_k < V:
        kth_largest = z.topk(top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth_largest, float("-inf"))
    p = torch.softmax(z, dim=-1)
    if top_p is not None:
        # mass_above[..., j] = sum of the p_i with p_i > p_j
        bigger = p.unsqueeze(-2) > p.unsqueeze(-1)  # (..., j, i)
        mass_above = (p.unsqueeze(-2) * bigger).sum(dim=-1)
        p = torch.where(mass_above < top_p, p, torch.zeros_like(p))
        p = p / p.sum(dim=-1, keepdim=True)
    return p
