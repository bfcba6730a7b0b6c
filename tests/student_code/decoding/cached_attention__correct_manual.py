def cached_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    T_q, T_k = q.shape[-2], k.shape[-2]
    if T_q > T_k:
        raise ValueError("T_q must not exceed T_k")
    scores = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    row = torch.arange(T_q).unsqueeze(1) + (T_k - T_q)  # absolute position of each new query
    scores = scores.masked_fill(torch.arange(T_k) > row, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v.double()).to(q.dtype)
