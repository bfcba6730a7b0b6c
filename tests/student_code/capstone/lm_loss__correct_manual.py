def lm_loss(logits, tokens, pad_id=None):
    """The loss written out: a log-softmax by hand, a 0/1 weight per target, a sum divided by the count."""
    if logits.ndim != 3:
        raise ValueError("logits must be (B, T, V)")
    if tokens.ndim != 2 or tuple(tokens.shape) != tuple(logits.shape[:2]):
        raise ValueError("tokens must be (B, T), like the logits' first two dims")
    if tokens.dtype not in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
        raise ValueError("tokens must be an integer tensor")
    V = logits.shape[2]
    if logits.shape[1] < 2:
        raise ValueError("need at least two tokens")
    work = logits.to(torch.float32) if logits.dtype in (torch.float16, torch.bfloat16) else logits
    z = work[:, :-1, :]                      # (B, T-1, V): row t predicts token t + 1
    y = tokens[:, 1:].to(torch.int64)        # (B, T-1)
    real = torch.ones_like(y, dtype=torch.bool) if pad_id is None else (y != pad_id)
    count = int(real.sum())
    if count == 0:
        raise ValueError("only padding to predict")
    if bool(((y < 0) | (y >= V))[real].any()):
        raise ValueError("target outside the vocabulary")
    m = z.max(dim=-1, keepdim=True).values.detach()
    log_probs = z - m - torch.log(torch.exp(z - m).sum(dim=-1, keepdim=True))
    picked = torch.gather(log_probs, 2, torch.where(real, y, 0).unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    return -(picked * real.to(work.dtype)).sum() / count
