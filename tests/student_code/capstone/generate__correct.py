def sampling_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """Exercise 4's answer, repeated so that this cell stands alone."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not math.isfinite(temperature) or temperature < 0:
        raise ValueError("temperature must be finite and >= 0")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError("top_k must be an int >= 1")
    if top_p is not None and not (0 < top_p <= 1):
        raise ValueError("top_p must lie in (0, 1]")
    z = logits.double() if logits.dtype == torch.float64 else logits.float()
    if temperature == 0:
        return F.one_hot(z.argmax(dim=-1), z.shape[-1]).to(z.dtype)
    z = z / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(z < z.topk(top_k, dim=-1).values[..., -1:], float("-inf"))
    p = torch.softmax(z, dim=-1)
    if top_p is not None:
        mass_above = (p.unsqueeze(-2) * (p.unsqueeze(-2) > p.unsqueeze(-1))).sum(dim=-1)
        p = torch.where(mass_above < top_p, p, torch.zeros_like(p))
        p = p / p.sum(dim=-1, keepdim=True)
    return p


@torch.no_grad()
def generate(model, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 0.0, top_k: int | None = None,
             top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """prompt (B, T) followed by max_new_tokens tokens drawn through the model's key/value cache."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError("the prompt must be (B, T) with T >= 1")
    tokens = [prompt.clone()]
    if max_new_tokens == 0:
        return tokens[0]
    logits, past = model(prompt)
    for i in range(max_new_tokens):
        probs = sampling_probs(logits[:, -1], temperature, top_k, top_p)
        nxt = torch.multinomial(probs, 1, generator=generator).to(prompt.dtype)
        tokens.append(nxt)
        if i < max_new_tokens - 1:
            logits, past = model(nxt, past)
    return torch.cat(tokens, dim=1)
